"""Seconds per RL step and peak memory: ours (`generate` + `verify_batch` + `rl_update`) vs TRL's `GRPOTrainer`.

    pip install -e ".[bench]"   # TRL
    python benchmarks/vs_trl.py [--prompts 16] [--generations 8] [--max-new-tokens 40] [--steps 3] [--models tiny,vocab152k]

Both sides get an identical copy of the same Llama: `tiny` (`--model`, e.g. the pipeline's SFT
policy, which earns some reward; default: the embedded architecture, freshly initialised) and
`vocab152k`, a freshly initialised ~54M-parameter Llama with Qwen2's 151,936-token vocabulary
(tied embeddings; the byte tokenizer's ids are a subset, sampled ids beyond it decode to nothing),
where the vocabulary-wide logits dominate memory. Each run is a process of its own, so its peak
memory (resident set above what it held once the model and trainer were built) is its own;
the same arithmetic train prompts, the same group size and completion budget, the same
verifier as reward, fp32 on the CPU, one optimizer step per generation batch, no KL (TRL's default beta=0; ours kl_coef=0) and token-mean loss (TRL's
default `dapo` loss). Ours runs at its defaults: forward and backward in micro-batches of at most
`UpdateConfig.micro_batch_tokens` padded tokens, gradients accumulated to one step. TRL gets two
rows: its one-pass configuration of that batch (`per_device_train_batch_size` = the batch), and
the same step in 4 gradient-accumulated micro-batches (`per_device_train_batch_size` = batch / 4,
`gradient_accumulation_steps` = `steps_per_generation` = 4: one generation of the whole batch,
one optimizer step), TRL's own memory knob. The runs alternate `--repeats` times (so a busy machine slows both
alike); each run makes one warm-up step, then `--steps` timed steps. The table gives the median
and minimum seconds per step and where it goes: generation, reward (verification), forward
passes outside generation (log-probs), and the rest (backward, optimizer, glue). The row
"ours, no skip", turns `skip_zero_advantage` off to show what skipping the backward pass of
zero-advantage samples saves.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import re
import resource
import statistics
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.models.policy import Policy, load_policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.verification import VerifyConfig, verify_batch

VERIFY = VerifyConfig(workers=1, timeout_seconds=5.0, max_input_chars=4000)
LEVELS = {1: {"digits": 1, "operands": 2, "ops": "+-"}, 2: {"digits": 2, "operands": 2, "ops": "+-*"}}


class PhaseTimer:
    """Seconds per phase; the model's forward passes outside generation count as `forward`."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.current: str | None = None
        self._start = 0.0
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        if self.current != "generation":
            self.seconds["forward"] += time.perf_counter() - self._start

    @contextlib.contextmanager
    def phase(self, name: str):
        previous, self.current = self.current, name
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self.current = previous

    def wrap(self, name: str, func):
        def timed(*args, **kwargs):
            with self.phase(name):
                return func(*args, **kwargs)
        return timed


QWEN2_VOCAB = 151_936
# The models compared: the embedded architecture, and one whose logits cost what a real vocabulary's do.
MODELS = {"tiny": (TinyModelConfig(), None), "vocab152k": (TinyModelConfig(hidden_size=320, intermediate_size=864), QWEN2_VOCAB)}


def make_model(kind: str, path: str | None, seed: int = 0):
    """The policy at `path` (e.g. the pipeline's SFT policy) for `tiny`, or a freshly initialised Llama of `MODELS`."""
    if path and kind == "tiny":
        policy = load_policy(path, device="cpu")
        return policy.model, policy.tokenizer
    tokenizer = build_byte_tokenizer()
    config, vocab = MODELS[kind]
    model = build_tiny_model(config, vocab or len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                             tokenizer.eos_token_id, seed)
    return model, tokenizer


def resident_mb() -> float:
    """This process's resident memory now (MB)."""
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text())[1]) / 1024


def peak_mb() -> float:
    """This process's peak resident memory so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(model, tokenizer, domain, batches, args, skip: bool = True) -> tuple[list[float], list[dict[str, float]], float, float, float]:
    policy = Policy(model, tokenizer)
    timer = PhaseTimer(model)
    config = UpdateConfig(lr=1e-5, minibatch_size=args.prompts * args.generations, warmup_steps=0,
                          skip_zero_advantage=skip)
    setup = resident_mb()
    steps, phases, lengths, rewards = [], [], [], []
    for k, tasks in enumerate(batches):
        timer.seconds.clear()
        start = time.perf_counter()
        with timer.phase("generation"):
            completions, _ = generate(policy, [t.prompt for t in tasks], args.generations,
                                      SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=512, seed=k))
        with timer.phase("reward"):
            scores, _ = verify_batch(domain, [c.text for c in completions],
                                     [tasks[c.prompt_index].reference for c in completions], VERIFY)
        samples = [Sample(tasks[c.prompt_index].task_id, c.prompt_ids, c.completion_ids, s.reward)
                   for c, s in zip(completions, scores)]
        rewards += [s.reward for s in scores]
        with timer.phase("update"):
            rl_update(policy, samples, config)
        steps.append(time.perf_counter() - start)
        phases.append(dict(timer.seconds))
        lengths += [len(c.completion_ids) for c in completions]
    return steps, phases, statistics.mean(lengths), statistics.mean(rewards), peak_mb() - setup


def run_trl(model, tokenizer, domain, batches, args, accumulation: int = 1) -> tuple[list[float], list[dict[str, float]], float, float, float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": [{"role": "user", "content": t.prompt}], "answer": t.reference["answer"]}
            for tasks in batches for t in tasks]
    lengths: list[int] = []
    rewards: list[float] = []

    def reward(prompts, completions, completion_ids, answer, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        lengths.extend(len(ids) for ids in completion_ids)
        scores, _ = verify_batch(domain, texts, [{"answer": a} for a in answer], VERIFY)
        rewards.extend(s.reward for s in scores)
        return [s.reward for s in scores]

    steps: list[float] = []
    phases: list[dict[str, float]] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, *_, **__):
            timer.seconds.clear()
            self.start = time.perf_counter()

        def on_step_end(self, *_, **__):
            steps.append(time.perf_counter() - self.start)
            phases.append(dict(timer.seconds))

    batch = args.prompts * args.generations
    config = GRPOConfig(
        output_dir=args.trl_output_dir, use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=10**6,
        save_strategy="no", per_device_train_batch_size=batch // accumulation, gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation,
        num_generations=args.generations, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0,
        learning_rate=1e-5, beta=0.0, loss_type="dapo", max_steps=len(batches), seed=0, dataloader_num_workers=0,
        shuffle_dataset=False, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, callbacks=[StepTimes()])
    timer = PhaseTimer(trainer.model)
    trainer._generate = timer.wrap("generation", trainer._generate)
    trainer._calculate_rewards = timer.wrap("reward", trainer._calculate_rewards)
    setup = resident_mb()
    trainer.train()
    return steps, phases, statistics.mean(lengths), statistics.mean(rewards), peak_mb() - setup


TRL_MICRO = 4  # micro-batches of TRL's gradient-accumulating row
RUNNERS = {"ours": run_ours, "ours, no skip": lambda *a: run_ours(*a, skip=False), "trl": run_trl,
           f"trl, {TRL_MICRO} micro-batches": lambda *a: run_trl(*a, accumulation=TRL_MICRO)}


def run_one(name: str, kind: str, args: argparse.Namespace):
    """One framework's run on one model, in a process of its own (its peak memory is its own)."""
    torch.set_num_threads(args.threads)
    domain = ArithmeticDomain(LEVELS, {"train": args.prompts * (args.steps + 1)}, seed=0)
    tasks = domain.generate_tasks()
    batches = [tasks[i : i + args.prompts] for i in range(0, len(tasks), args.prompts)]
    model, tokenizer = make_model(kind, args.model)
    torch.manual_seed(0)
    return (*RUNNERS[name](model, tokenizer, domain, batches, args), sum(p.numel() for p in model.parameters()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each framework")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both sides)")
    parser.add_argument("--trl-output-dir", default="/tmp/vs_trl")
    parser.add_argument("--models", default="tiny,vocab152k", help=f"comma-separated, of {sorted(MODELS)}")
    parser.add_argument("--model", default=None,
                        help="policy directory for the `tiny` row, e.g. data/06_models/sft_policy (default: a fresh tiny Llama)")
    args = parser.parse_args()
    kinds = args.models.split(",")
    if unknown := set(kinds) - MODELS.keys():
        parser.error(f"unknown --models {sorted(unknown)}; choose from {sorted(MODELS)}")

    import trl
    print(f"one RL step: {args.prompts} prompts x {args.generations} generations, <= {args.max_new_tokens} new tokens, "
          f"fp32 CPU, {args.threads} thread(s), trl {trl.__version__}; {args.repeats} alternating runs of "
          f"{args.steps} timed steps each, each run a process of its own")
    print("| model | framework | median s/step | min s/step | generation | reward | forward | rest | train s/step | peak MB | mean len | mean reward |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    spawn = multiprocessing.get_context("spawn")
    for kind in kinds:
        steps: dict[str, list[float]] = defaultdict(list)
        phases: dict[str, list[dict[str, float]]] = defaultdict(list)
        lengths: dict[str, list[float]] = defaultdict(list)
        rewards: dict[str, list[float]] = defaultdict(list)
        peaks: dict[str, list[float]] = defaultdict(list)
        for _ in range(args.repeats):  # alternate the runs, so a busy machine slows each alike
            for name in RUNNERS:
                with ProcessPoolExecutor(1, mp_context=spawn) as pool:
                    times, per_step, mean_length, mean_reward, peak, params = pool.submit(run_one, name, kind, args).result()
                steps[name] += times[1:]  # the first step of each run is a warm-up
                phases[name] += per_step[1:]
                lengths[name].append(mean_length)
                rewards[name].append(mean_reward)
                peaks[name].append(peak)
        label = f"{kind} ({params / 1e6:.1f}M{', ' + args.model if args.model and kind == 'tiny' else ''})"
        median, train = {}, {}
        for name in RUNNERS:
            median[name] = statistics.median(steps[name])
            # the training part of a step (log-probs, loss, backward, optimizer): the step less generation and reward
            train[name] = statistics.median(t - p.get("generation", 0.0) - p.get("reward", 0.0)
                                            for t, p in zip(steps[name], phases[name]))
            mean = {k: statistics.mean(p.get(k, 0.0) for p in phases[name]) for k in ("generation", "reward", "forward")}
            rest = statistics.mean(steps[name]) - sum(mean.values())
            print(f"| {label} | {name} | {median[name]:.3f} | {min(steps[name]):.3f} | {mean['generation']:.3f} | "
                  f"{mean['reward']:.3f} | {mean['forward']:.3f} | {rest:.3f} | {train[name]:.3f} | {max(peaks[name]):.0f} | "
                  f"{statistics.mean(lengths[name]):.1f} | {statistics.mean(rewards[name]):.3f} |")
        for name in ("ours", "ours, no skip"):
            for peer in (n for n in RUNNERS if n.startswith("trl")):
                print(f"{kind}: {name} vs {peer}: speed median {median[peer] / median[name]:.2f}x, "
                      f"min {min(steps[peer]) / min(steps[name]):.2f}x, training part {train[peer] / train[name]:.2f}x; "
                      f"peak memory {max(peaks[name]) / max(peaks[peer]):.2f}x")
    print("(phases: mean seconds per timed step; forward = model forward passes outside generation (log-probs); "
          "rest = backward + optimizer + glue; train = median of (step - generation - reward); peak MB = the run's peak "
          "resident memory (getrusage ru_maxrss, the kernel's high-water mark of the process's RSS, which sees torch's "
          "allocations unlike tracemalloc) above its RSS once model and trainer were built, one process per run)")


if __name__ == "__main__":
    main()
