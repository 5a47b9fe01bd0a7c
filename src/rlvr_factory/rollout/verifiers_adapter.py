"""Rollouts of `verifiers` v1 environments, sampled from the policy through the OpenAI-compatible endpoint.

`verifiers` (Prime Intellect's environments, the Environments Hub) drives the model itself: its harness
sends chat requests, and its training client (`--client.type train`) renders them to token ids locally
and calls `/inference/v1/generate`, one session (``X-Session-ID``) per trace. `verifiers` 0.4.0 pins
`openai<3` and `mcp==2.0.0`, so it lives in a venv of its own (`scripts/install_verifiers.sh`,
`.venv-verifiers`); the adapter runs that venv's `vf-eval` on the environment's tasks, with the
`subprocess` runtime, while the calling thread samples its requests (`Endpoint.run`).

Each trace of `vf-eval`'s output (`traces.jsonl`) is one rollout: its task, its reward (the weighted sum
of its `@vf.reward` scores, as `verifiers` computes it) and the token graph verifiers recorded. Its
episode comes from the endpoint's record of that session (`Recorder.episodes`), and the two must agree
token by token: the trace's node tokens, in order, are the episode's prompt and completion, the tokens
verifiers marks as sampled are the episode's action tokens, and their log-probs are the engine's. A trace
that disagrees, that failed in verifiers, or that has no calls is an `error` rollout with the reason,
never trained on. (verifiers writes log-probs rounded to 3 decimals, so those agree to that rounding;
the episode trains with the engine's own.)
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.verifiers import DEFAULT_VENV, VerifiersDomain
from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig
from rlvr_factory.rollout.engine import Engine, SamplingConfig
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.verifiers.score import Score

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifiersSettings:
    env_id: str  # an installed verifiers taskset package (vf-eval's first argument), e.g. `sums`
    venv: str = DEFAULT_VENV  # where `vf-eval` is (scripts/install_verifiers.sh)
    num_tasks: int = 8  # the taskset's first tasks (vf-eval --select.limit), unless `run_verifiers` names them
    rollouts_per_task: int = 4  # the group size (vf-eval -r)
    max_concurrent: int = 32  # episodes in flight at once (vf-eval -c)
    max_tokens: int = 64  # token budget of one model turn
    temperature: float = 1.0
    top_p: float = 1.0  # nucleus sampling mass
    harness: str = "null"  # verifiers' harness: `null` is its plain chat program
    runtime: str = "subprocess"  # verifiers' runtime for the harness (`subprocess`: local processes)
    timeout_s: float = 1800.0  # the whole vf-eval run
    env_args: tuple[str, ...] = ()  # further vf-eval arguments, e.g. ("--env.taskset.seed", "3")


@dataclass
class VerifiersRollout:
    """One trace of a `verifiers` run, with its token-exact episode."""

    trace_id: str
    task_index: int
    reward: float
    rewards: dict[str, tuple[float, float]] = field(default_factory=dict)  # name -> (score, weight)
    episode: Episode | None = None
    error: str | None = None


class VerifiersRunError(RuntimeError):
    """`vf-eval` could not run (not installed, failed, timed out): the message says which and how to fix it."""


def vf_eval_command(settings: VerifiersSettings, base_url: str, tokenizer_dir: str | Path, model: str,
                    output_dir: str | Path, task_indices: Sequence[int] | None = None) -> list[str]:
    """The `vf-eval` command line: the training client against the endpoint, no upload, output in `output_dir`;
    the tasks at `task_indices` of the taskset's `load()` order, or its first `settings.num_tasks`."""
    select = (["--select.include.idx", ",".join(str(int(i)) for i in task_indices)] if task_indices is not None
              else ["--select.limit", str(settings.num_tasks)])
    return [
        str(Path(settings.venv) / "bin" / "vf-eval"), settings.env_id, "--model", model,
        "--num-rollouts", str(settings.rollouts_per_task), "--max-concurrent", str(settings.max_concurrent),
        *select, "--no-push", "--rich", "None",
        "--output-dir", str(output_dir), "--run.dir", "run",
        "--client.type", "train", "--client.base-url", base_url + "/v1", "--client.api-key-var", "RLVR_ENDPOINT_KEY",
        "--client.renderer-model-name", str(tokenizer_dir),
        "--sampling.max-tokens", str(settings.max_tokens), "--sampling.temperature", str(settings.temperature),
        "--sampling.top-p", str(settings.top_p),
        "--env.agent.harness.id", settings.harness, "--env.agent.runtime.type", settings.runtime,
        *settings.env_args,
    ]


def run_verifiers(endpoint: Endpoint, settings: VerifiersSettings, tokenizer_dir: str | Path,
                  output_dir: str | Path, task_indices: Sequence[int] | None = None) -> list[VerifiersRollout]:
    """Run the environment's tasks through `vf-eval` against `endpoint` (sampling on this thread); the rollouts.

    `tokenizer_dir` holds the served policy's tokenizer (verifiers renders the chat with it); `task_indices`
    picks tasks by their position in the taskset (default: its first `settings.num_tasks`)."""
    if task_indices is not None and (not task_indices or any(int(i) < 0 for i in task_indices)):
        raise ValueError(f"task_indices must be non-negative positions in the taskset, got {list(task_indices)}")
    settings = replace(settings, venv=str(Path(settings.venv).resolve()))  # vf-eval runs in `output_dir`
    tokenizer_dir, output_dir = Path(tokenizer_dir).resolve(), Path(output_dir).resolve()
    vf_eval = Path(settings.venv) / "bin" / "vf-eval"
    if not vf_eval.exists():
        raise VerifiersRunError(f"no vf-eval at {vf_eval}; install verifiers with `bash scripts/install_verifiers.sh "
                                f"{settings.venv}`")
    output_dir.mkdir(parents=True, exist_ok=True)
    command = vf_eval_command(settings, endpoint.url, tokenizer_dir, endpoint.server.config.model_name, output_dir,
                              task_indices)
    env = {**os.environ, "RLVR_ENDPOINT_KEY": "none", "DO_NOT_TRACK": "true",
           "PATH": f"{Path(settings.venv).resolve() / 'bin'}:{os.environ.get('PATH', '')}"}  # its uv first
    try:
        done = endpoint.run(subprocess.run, command, capture_output=True, text=True, timeout=settings.timeout_s,
                            env=env, cwd=output_dir)
    except subprocess.TimeoutExpired:
        raise VerifiersRunError(f"vf-eval {settings.env_id} ran past {settings.timeout_s:g} s") from None
    log = (done.stdout or "")[-2000:] + (done.stderr or "")[-2000:]
    traces = output_dir / "run" / "traces.jsonl"
    if done.returncode != 0 or not traces.exists():
        raise VerifiersRunError(f"vf-eval {settings.env_id} failed (exit status {done.returncode}); its output "
                                f"ends:\n{log}")
    decode = endpoint.server.decode
    rollouts = []
    for number, line in enumerate(traces.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:  # NaN is read, so that its trace alone becomes an error rollout
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise VerifiersRunError(f"{traces}, line {number}, is not JSON ({type(e).__name__})") from None
        for trace in (row.get("traces") if isinstance(row, dict) else None) or []:
            rollouts.append(_rollout(trace, endpoint, decode))
    return rollouts


def _rollout(trace: Any, endpoint: Endpoint, decode) -> VerifiersRollout:
    try:
        trace_id = str(trace["id"])
        index = int(trace["task"]["data"]["idx"])
        rewards = {str(name): (float(r["score"]), float(r.get("weight", 1.0)))
                   for name, r in (trace.get("rewards") or {}).items() if r is not None}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        return VerifiersRollout(str(trace.get("id") if isinstance(trace, dict) else None), -1, 0.0,
                                error=f"the trace cannot be read ({type(e).__name__}: {e})")
    reward = sum(score * weight for score, weight in rewards.values())
    rollout = VerifiersRollout(trace_id, index, reward, rewards)
    if not trace.get("ok", False) or trace.get("errors"):
        rollout.error = f"verifiers reported an error: {json.dumps(trace.get('errors'))[:500]}"
        return rollout
    if not math.isfinite(reward):
        rollout.error = f"the reward is not finite: {rewards}"
        return rollout
    episodes = endpoint.recorder.episodes(trace_id, decode)
    if len(episodes) != 1:
        rollout.error = (f"the endpoint recorded {len(episodes)} episodes for trace {trace_id} (one expected: "
                         "each call continues the one before)")
        return rollout
    problem = token_mismatch(trace, episodes[0])
    if problem is not None:
        rollout.error = problem
        return rollout
    episode = episodes[0]
    episode.task_index = index
    rollout.episode = episode
    return rollout


def token_mismatch(trace: dict, episode: Episode, tolerance: float = 5e-4 + 1e-9) -> str | None:
    """Why verifiers' record of a trace differs from the episode the endpoint sampled; None when they agree
    token by token: the tokens exactly, which are sampled exactly, and the sampled tokens' log-probs within
    `tolerance` (verifiers writes them rounded to 3 decimals; the episode keeps the engine's own)."""
    nodes = trace.get("nodes") or []
    if any(node.get("parent", i - 1) != i - 1 for i, node in enumerate(nodes) if i > 0):
        return "the trace branches; only linear traces (one conversation) are trained on"
    tokens = [t for node in nodes for t in node.get("token_ids") or []]
    mask = [bool(m) for node in nodes for m in node.get("mask") or []]
    logprobs = [x for node in nodes for x in node.get("logprobs") or []]
    ours = episode.prompt_ids + episode.completion_ids
    ours_mask = [False] * len(episode.prompt_ids) + [bool(m) for m in episode.loss_mask]
    ours_logprobs = [x for turn in episode.turns for x in turn.logprobs]
    # verifiers' graph ends with the last sampled node; an observation after it is not part of it
    if tokens != ours[: len(tokens)] or len(tokens) < len(episode.prompt_ids) + 1:
        first = next((i for i, (a, b) in enumerate(zip(tokens, ours)) if a != b), min(len(tokens), len(ours)))
        return f"verifiers' tokens differ from the sampled episode's at position {first}"
    if mask != ours_mask[: len(mask)] or sum(mask) != sum(ours_mask):
        return "verifiers' sampled-token mask differs from the episode's loss mask"
    if len(logprobs) != len(ours_logprobs) or any(abs(a - b) > tolerance for a, b in zip(logprobs, ours_logprobs)):
        return "verifiers' log-probs differ from the engine's"
    return None


def samples(rollouts: list[VerifiersRollout], domain: str = "verifiers") -> list:
    """The update's samples (`training.grpo.Sample`) of the rollouts that have an episode: grouped by task, the
    episode's tokens, loss mask and sampling log-probs, the trace's reward. Error rollouts are left out."""
    from rlvr_factory.training.grpo import Sample

    return [Sample(group=str(r.task_index), prompt_ids=list(r.episode.prompt_ids),
                   completion_ids=r.episode.completion_ids, reward=r.reward, domain=domain,
                   truncated=r.episode.finish_reason == "length", loss_mask=r.episode.loss_mask,
                   sampling_logprobs=r.episode.logprobs, episode=r.trace_id)
            for r in rollouts if r.episode is not None and r.error is None]


def verifiers_episodes(engine: Engine, tokenizer: Any, domain: VerifiersDomain, tasks: Sequence[Task], samples: int,
                       sampling: SamplingConfig) -> tuple[list[Episode], dict[str, float]]:
    """`samples` episodes of each task (task-major order, as the agent loop returns them), sampled from `engine`
    by the domain's environment through `vf-eval` against an endpoint served for this call, and the stats.

    Each episode is its trace's token-exact record with the environment's reward as its verdict (correct when it
    reaches `domain.success_reward`). A trace that failed or disagrees with the engine's samples is an `error`
    episode with the reason; a task left without a trace, or a `vf-eval` run that failed, gives `infra_error`
    episodes (never a wrong answer). A missing install raises `VerifiersRunError`, saying how to install it."""
    start = time.perf_counter()
    settings = VerifiersSettings(domain.env_id, venv=domain.venv, num_tasks=len(tasks), rollouts_per_task=samples,
                                 max_concurrent=domain.max_concurrent, max_tokens=sampling.max_new_tokens,
                                 temperature=sampling.temperature, top_p=sampling.top_p,
                                 timeout_s=domain.timeout_seconds, env_args=domain.env_args)
    if not (Path(settings.venv) / "bin" / "vf-eval").exists():
        raise VerifiersRunError(f"domain verifiers: no vf-eval in {settings.venv}; install verifiers and the "
                                f"environment with `bash scripts/install_verifiers.sh {settings.venv}`")
    positions = [domain.position(t) for t in tasks]
    endpoint = Endpoint(engine, tokenizer, EndpointConfig(model_name=domain.env_id, max_batch=max(64, sampling.batch_size)))
    by_position: dict[int, list[VerifiersRollout]] = defaultdict(list)
    failure = None
    with tempfile.TemporaryDirectory(prefix="rlvr-verifiers-") as scratch, endpoint:
        tokenizer.save_pretrained(Path(scratch) / "tokenizer")
        try:
            for rollout in run_verifiers(endpoint, settings, Path(scratch) / "tokenizer", Path(scratch) / "out",
                                         sorted(set(positions))):
                by_position[rollout.task_index].append(rollout)
        except VerifiersRunError as e:
            failure = str(e)
            log.warning("domain verifiers: %s", failure)
    episodes = [_episode(k, s, by_position[position], domain.success_reward, failure, position)
                for k, position in enumerate(positions) for s in range(samples)]
    new_tokens = sum(e.policy_tokens for e in episodes)
    seconds = time.perf_counter() - start
    return episodes, {"rollout_seconds": seconds, "engine_new_tokens": float(new_tokens),
                      "tokens_per_second": new_tokens / max(seconds, 1e-9), "env_steps": float(len(endpoint.recorder.calls)),
                      "verifiers_errors": float(sum(e.error is not None for e in episodes))}


def _episode(task_index: int, sample: int, rollouts: list[VerifiersRollout], success_reward: float,
             failure: str | None, position: int) -> Episode:
    """Sample `sample` of a task from its rollouts: the trace's episode with its verdict, or a failed episode."""
    if sample >= len(rollouts):
        message = failure or f"vf-eval returned {len(rollouts)} traces for taskset position {position}, not {sample + 1}"
        return _failed(task_index, sample, "infra_error", message)
    rollout = rollouts[sample]
    if rollout.episode is None or rollout.error is not None:
        return _failed(task_index, sample, "error", rollout.error or "the trace has no episode")
    episode = replace(rollout.episode, task_index=task_index, sample_index=sample)
    truncated = episode.finish_reason == "length"
    episode.finish_reason = "length" if truncated else "done"
    episode.out_of_budget = truncated
    episode.score = Score(rollout.reward, rollout.reward >= success_reward,
                          breakdown={name: score for name, (score, _) in sorted(rollout.rewards.items())})
    return episode


def _failed(task_index: int, sample: int, status: str, message: str) -> Episode:
    return Episode(task_index, sample, [], finish_reason=status, score=Score(0.0, False, status=status, message=message),
                   error=message)
