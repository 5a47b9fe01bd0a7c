"""Seconds per RL step: ours (`generate` + `verify_batch` + `rl_update`) vs TRL's `GRPOTrainer`.

    pip install -e ".[bench]"   # TRL
    python benchmarks/vs_trl.py [--prompts 16] [--generations 8] [--max-new-tokens 40] [--steps 3]

Both sides get an identical copy of the same tiny Llama (`--model`, e.g. the pipeline's SFT
policy, which earns some reward; default: the embedded architecture, freshly initialised),
the same arithmetic train prompts, the same group size and completion budget, the same
verifier as reward, fp32 on the CPU, one optimizer step per generation batch, no KL (TRL's default beta=0; ours kl_coef=0) and token-mean loss (TRL's
default `dapo` loss). The two sides alternate `--repeats` times (so a busy machine slows both
alike); each run makes one warm-up step, then `--steps` timed steps. The table gives the median
and minimum seconds per step and where it goes: generation, reward (verification), forward
passes outside generation (log-probs), and the rest (backward, optimizer, glue). A third row,
"ours, no skip", turns `skip_zero_advantage` off to show what skipping the backward pass of
zero-advantage samples saves.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
from collections import defaultdict

import torch

from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.models.policy import Policy, load_policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.verification import verify_batch

VERIFY = {"workers": 1, "timeout_seconds": 5.0, "max_input_chars": 4000}
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


def make_model(path: str | None, seed: int = 0):
    """The policy at `path` (e.g. the pipeline's SFT policy), or a freshly initialised tiny Llama."""
    if path:
        policy = load_policy(path, device="cpu")
        return policy.model, policy.tokenizer
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(TinyModelConfig(), len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                             tokenizer.eos_token_id, seed)
    return model, tokenizer


def run_ours(model, tokenizer, domain, batches, args, skip: bool = True) -> tuple[list[float], list[dict[str, float]], float, float]:
    policy = Policy(model, tokenizer)
    timer = PhaseTimer(model)
    config = UpdateConfig(lr=1e-5, minibatch_size=args.prompts * args.generations, warmup_steps=0,
                          skip_zero_advantage=skip)
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
    return steps, phases, statistics.mean(lengths), statistics.mean(rewards)


def run_trl(model, tokenizer, domain, batches, args) -> tuple[list[float], list[dict[str, float]], float, float]:
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
        save_strategy="no", per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=args.generations, max_completion_length=args.max_new_tokens, temperature=1.0, top_p=1.0,
        learning_rate=1e-5, beta=0.0, loss_type="dapo", max_steps=len(batches), seed=0, dataloader_num_workers=0,
        shuffle_dataset=False, disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer, callbacks=[StepTimes()])
    timer = PhaseTimer(trainer.model)
    trainer._generate = timer.wrap("generation", trainer._generate)
    trainer._calculate_rewards = timer.wrap("reward", trainer._calculate_rewards)
    trainer.train()
    return steps, phases, statistics.mean(lengths), statistics.mean(rewards)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each framework")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both sides)")
    parser.add_argument("--trl-output-dir", default="/tmp/vs_trl")
    parser.add_argument("--model", default=None,
                        help="policy directory, e.g. data/06_models/sft_policy (default: a fresh tiny Llama)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    domain = ArithmeticDomain(LEVELS, {"train": args.prompts * (args.steps + 1)}, seed=0)
    tasks = domain.generate_tasks()
    batches = [tasks[i : i + args.prompts] for i in range(0, len(tasks), args.prompts)]
    model, tokenizer = make_model(args.model)
    runners = {"ours": run_ours, "ours, no skip": lambda *a: run_ours(*a, skip=False), "trl": run_trl}
    steps: dict[str, list[float]] = defaultdict(list)
    phases: dict[str, list[dict[str, float]]] = defaultdict(list)
    lengths: dict[str, list[float]] = defaultdict(list)
    rewards: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeats):  # alternate the runs, so a busy machine slows each alike
        for name, run in runners.items():
            torch.manual_seed(0)
            times, per_step, mean_length, mean_reward = run(copy.deepcopy(model), tokenizer, domain, batches, args)
            steps[name] += times[1:]  # the first step of each run is a warm-up
            phases[name] += per_step[1:]
            lengths[name].append(mean_length)
            rewards[name].append(mean_reward)

    import trl
    print(f"one RL step: {args.prompts} prompts x {args.generations} generations, <= {args.max_new_tokens} new tokens, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M-parameter Llama ({args.model or 'fresh init'}), "
          f"fp32 CPU, {args.threads} thread(s), trl {trl.__version__}; {args.repeats} alternating runs of "
          f"{args.steps} timed steps each")
    print("| framework | median s/step | min s/step | generation | reward | forward | rest | mean len | mean reward |")
    print("|---|---|---|---|---|---|---|---|---|")
    median = {}
    for name in runners:
        median[name] = statistics.median(steps[name])
        mean = {k: statistics.mean(p.get(k, 0.0) for p in phases[name]) for k in ("generation", "reward", "forward")}
        rest = statistics.mean(steps[name]) - sum(mean.values())
        print(f"| {name} | {median[name]:.3f} | {min(steps[name]):.3f} | {mean['generation']:.3f} | {mean['reward']:.3f} | "
              f"{mean['forward']:.3f} | {rest:.3f} | {statistics.mean(lengths[name]):.1f} | "
              f"{statistics.mean(rewards[name]):.3f} |")
    for name in ("ours", "ours, no skip"):
        print(f"speed-up of {name} over trl: median {median['trl'] / median[name]:.2f}x, "
              f"min {min(steps['trl']) / min(steps[name]):.2f}x")
    print("(phases: mean seconds per timed step; forward = model forward passes outside generation (log-probs); "
          "rest = backward + optimizer + glue)")

if __name__ == "__main__":
    main()
