"""A learned reward behind the verifier contract, and the reward components it is mixed with.

`RewardModelVerifier` scores completions with a trained reward model (an HF sequence-classification
directory, or an implicit reward model: `models/reward_model.py`): r(x, y) is the model's scalar for
the chat-formatted prompt and completion. It is a
`Verifier` with a batched full check (`score_batch`), so a `VerifierPool` sends it `batch_size`
completions per job: one padded forward pass per batch, on worker processes that load the model
before they report ready, under the pool's time limit per batch. Each sample gets its own status:
an input longer than the model's context, or a non-finite reward, is an `error` (reward 0); a
batch that overruns is a `timeout` for each of its samples. The reward statistics saved with
the model (`reward_stats`: mean and std) are checked when it loads: one that is not a finite
number, or a std that is not positive, is refused with the file and key named
(`models.reward_model.reward_stats`), since it would turn every reward into NaN or 0, or flip them.

The gold a reward model reads is the prompt: `reward_model_gold(prompt)`.

A learned reward is mixed with a domain's verifier as named reward components (`combine`):
reward = sum_c w_c * breakdown[c] over `REWARD_COMPONENTS` (`verifier`, `rm`), with the weights
in the breakdown (`weight.verifier`, `weight.rm`), the verifier's verdict as the gold
(`gold_correct`; the Score's `correct`) and the verifier's own breakdown under `verifier.*`, so
per-component normalisation can read each component apart. A component whose reward is not a
finite number fails that sample (status `error`, reward 0) instead of entering the sum.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr_factory.verifiers.isolation import PARSE, ROUTE
from rlvr_factory.verifiers.score import Score

log = logging.getLogger(__name__)

REWARD_COMPONENTS = ("verifier", "rm")
_STATUS_ORDER = ("infra_error", "timeout", "error")  # of several failed components, the first of these wins
_LOADED: dict[tuple, Any] = {}  # (path, mtime, device, dtype) -> (Policy, stats): one copy per process


def reward_model_gold(prompt: str) -> str:
    """What a reward model is given besides the completion: the prompt, as the gold string."""
    return json.dumps({"prompt": prompt})


def _prompt_of(gold: str) -> str:
    try:
        prompt = json.loads(gold)["prompt"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"a reward model's gold must be reward_model_gold(prompt), got {gold[:80]!r}") from e
    if not isinstance(prompt, str):
        raise ValueError(f"a reward model's gold must carry the prompt as a string, got {type(prompt).__name__}")
    return prompt


class RewardModelVerifier:
    """r(x, y) from the reward model at `path`, `batch_size` completions per forward pass.

    `standardize` rescales rewards by the held-out mean and std saved with the model (its
    config's `reward_stats`), so a weight on the learned reward means the same for any model;
    `threads` caps torch's threads in each pool worker (the workers share the CPUs). The model is
    loaded on first use, once per process.
    """

    isolation = PARSE  # tokenised and scored by a network: nothing in the text is evaluated

    def __init__(self, path: str, batch_size: int = 64, device: str = "cpu", dtype: str = "float32",
                 standardize: bool = True, threads: int = 1) -> None:
        for name, value in (("batch_size", batch_size), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"reward_model.{name} must be a whole number >= 1, got {value!r}")
        if not isinstance(standardize, bool):
            raise ValueError(f"reward_model.standardize must be true or false, got {standardize!r}")
        self.path = str(path)
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.standardize = standardize
        self.threads = threads

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy in a worker process takes `threads` torch threads and loads the model at once,
        before the worker reports ready."""
        import torch

        self.__dict__.update(state)
        torch.set_num_threads(self.threads)
        self._model()

    def _model(self) -> tuple[Any, dict[str, float]]:
        """The loaded reward model and its reward statistics, checked at load (cached per process)."""
        from rlvr_factory.models.reward_model import load_reward_model, saved_reward_stats

        config = Path(self.path) / "config.json"
        if not config.exists():
            raise FileNotFoundError(f"no reward model at {self.path}; train one with `kedro run --pipeline=reward_model` "
                                    "or point domain.reward_model.path at an HF sequence-classification directory")
        key = (self.path, os.path.getmtime(config), self.device, self.dtype)
        if key not in _LOADED:
            policy = load_reward_model(self.path, self.device, self.dtype)
            _LOADED[key] = (policy, saved_reward_stats(policy.model.config, str(config)))
        return _LOADED[key]

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """Never: every verdict is a forward pass."""
        return None

    def score(self, completion: str, gold: str) -> Score:
        """The learned reward of one completion."""
        return self.score_batch([(completion, gold)])[0]

    def score_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """The learned reward of each (completion, gold) pair, in order, in forward passes of `batch_size`."""
        import torch

        from rlvr_factory.models.policy import max_positions
        from rlvr_factory.models.reward_model import sequence_rewards
        from rlvr_factory.training.lm import join_prompt_completion
        from rlvr_factory.training.sft import encode_chat_examples

        policy, stats = self._model()
        limit = max_positions(policy.model.config) or 10**9
        encoded = encode_chat_examples(policy.tokenizer, [_prompt_of(g) for _, g in pairs], [c for c, _ in pairs],
                                       split_special_tokens=True)
        mean, std = (stats.get("mean", 0.0), stats.get("std", 1.0)) if self.standardize else (0.0, 1.0)
        scores: list[Score] = [Score(0.0, False, "error")] * len(pairs)
        fits = [i for i, (p, c) in enumerate(encoded) if len(p) + len(c) <= limit]
        if len(fits) < len(pairs):
            log.warning("%d completion(s) longer than the reward model's context of %d tokens: status error",
                        len(pairs) - len(fits), limit)
        for lo in range(0, len(fits), self.batch_size):
            rows = fits[lo : lo + self.batch_size]
            ids, attention, mask = join_prompt_completion([encoded[i][0] for i in rows], [encoded[i][1] for i in rows],
                                                       policy.tokenizer.pad_token_id)
            with torch.inference_mode():
                rewards = sequence_rewards(policy.model, ids.to(policy.device), attention.to(policy.device),
                                           mask.to(policy.device)).cpu()
            for i, reward in zip(rows, rewards.tolist()):
                value = (reward - mean) / std
                if math.isfinite(value):
                    scores[i] = Score(value, False, "ok", {"rm": value, "rm_raw": reward})
                else:
                    log.warning("the reward model returned %s for a completion: status error", reward)
        return scores


def _finite(value: Any) -> bool:
    """Whether `value` is a finite real number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_weights(reward: str | Mapping[str, float]) -> dict[str, float]:
    """Component weights from `domain.reward`: `model` (the learned reward alone), or a mapping such
    as `{verifier: 1.0, rm: 0.5}` (verifier + 0.5 rm). A component left out weighs 0."""
    if reward == "model":
        return {"verifier": 0.0, "rm": 1.0}
    if isinstance(reward, Mapping):
        unknown = set(reward) - set(REWARD_COMPONENTS)
        weights = {c: reward.get(c, 0.0) for c in REWARD_COMPONENTS}
        if not unknown and all(_finite(w) and w >= 0 for w in weights.values()) and weights["rm"] > 0:
            return {c: float(w) for c, w in weights.items()}
    raise ValueError(f"domain.reward must be verifier, model, or component weights like {{verifier: 1.0, rm: 0.5}} "
                     f"(non-negative, rm > 0, components {list(REWARD_COMPONENTS)}); got {reward!r}")


def combine(verifier: Score, rm: Score, weights: Mapping[str, float]) -> Score:
    """One verdict from the components: reward = w_verifier * verifier + w_rm * rm, correct = the verifier's.

    A weighted component that could not judge makes the sample's status its own (infra_error before
    timeout before error) with reward 0; an unweighted verifier that failed leaves `gold_ok` at 0.
    """
    given = {"verifier": verifier, "rm": rm}
    values = {c: s.reward if _finite(s.reward) else 0.0 for c, s in given.items()}
    statuses = {c: s.status if _finite(s.reward) else "error" for c, s in given.items()}
    failed = [statuses[c] for c in REWARD_COMPONENTS if weights[c] > 0 and statuses[c] != "ok"]
    status = min(failed, key=_STATUS_ORDER.index) if failed else "ok"
    breakdown = {
        **values, **{f"weight.{c}": float(weights[c]) for c in REWARD_COMPONENTS},
        "gold_correct": float(verifier.correct), "gold_ok": float(verifier.status == "ok"),
        **{f"verifier.{k}": v for k, v in verifier.breakdown.items()},
    }
    reward = sum(weights[c] * values[c] for c in REWARD_COMPONENTS) if status == "ok" else 0.0
    return Score(reward, verifier.correct, status, breakdown)


class LearnedRewardVerifier:
    """The components behind one `Verifier` (one pool, one job per check): for callers that hold a
    verifier rather than a domain. The learned-reward domain's `verify_batch` is the batched path."""

    isolation = ROUTE  # the inner verifier behind its own boundary, the reward model's forward pass

    def __init__(self, verifier: Any, reward_model: RewardModelVerifier, weights: Mapping[str, float]) -> None:
        self.verifier = verifier
        self.reward_model = reward_model
        self.weights = dict(weights)

    @staticmethod
    def _split(gold: str) -> tuple[str, str]:
        tagged = json.loads(gold)
        return tagged["gold"], reward_model_gold(tagged["prompt"])

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """Never: the learned reward needs a forward pass."""
        return None

    def score(self, completion: str, gold: str) -> Score:
        """Both components of one completion, combined."""
        verifier_gold, rm_gold = self._split(gold)
        verdict = self.verifier.quick_score(completion, verifier_gold) or self.verifier.score(completion, verifier_gold)
        return combine(verdict, self.reward_model.score(completion, rm_gold), self.weights)
