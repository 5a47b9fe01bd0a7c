"""The inference-engine interface the agent loop samples through: token ids in, token ids out.

An engine takes each episode's whole context as token ids and returns the tokens it sampled,
exactly, with their sampling log-probs and why generation stopped. It may keep what it
computed for a context (a KV cache) and reuse it when a later context extends that context:
the transformers engine (`rollout.hf.TransformersEngine`) continues each episode from its
cache, a vLLM engine gets the same from its prefix cache. `key` names the episode a request
belongs to, so an engine can find its cache without hashing the context; an engine is free
to ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Hashable, Protocol, Sequence

from rlvr_factory.schema import SET_BY_RUN, NonNegativeFloat, PositiveInt, Range

FINISH_REASONS = ("stop", "length")  # the end-of-turn token was sampled | the turn's token budget ran out


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: PositiveInt = 40  # token budget of one turn; a turn that reaches it ends with finish_reason=length
    temperature: NonNegativeFloat = 1.0  # 0 means greedy decoding
    top_p: Annotated[float, Range(gt=0, le=1)] = 1.0  # nucleus sampling mass
    batch_size: PositiveInt = 512  # sequences per forward batch
    batch_by_length: bool = False  # transformers engine: batch new contexts of similar length together (less left padding when prompt lengths vary); false: in request order
    share_prefill: bool = False  # transformers engine: a context that several requests of a batch repeat (a group's samples, pass@k) is run through the model once and its KV cache copied to each; false: every row computes its own
    seed: int = field(default=0, metadata=SET_BY_RUN)  # sampling seed (the run sets it: rl.seed and the round, evaluate.seed, ...)


@dataclass(frozen=True)
class Request:
    """One context to continue: the episode's token ids so far, and the episode it belongs to."""

    context: Sequence[int]
    key: Hashable = None


@dataclass(frozen=True)
class Generation:
    """What the engine sampled for one request, exactly as sampled."""

    token_ids: list[int]  # the sampled tokens, the end-of-turn token included when it was sampled
    logprobs: list[float]  # log-probability of each under the distribution it was sampled from
    finish_reason: str  # "stop" or "length"


@dataclass
class EngineStats:
    """What one `generate` call computed: prompt tokens run through the model, tokens sampled, seconds."""

    prefill_tokens: int = 0  # context tokens the model computed (not the ones a cache already held)
    cached_tokens: int = 0  # context tokens taken from a cache
    new_tokens: int = 0  # tokens sampled
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


class Engine(Protocol):
    """Samples continuations of token contexts, in batches, deterministically for a given seed."""

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        """One turn for every request, in order; the end-of-turn token or `config.max_new_tokens` ends each."""
