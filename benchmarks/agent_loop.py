"""The agent loop with KV reuse across turns vs recomputing every episode's history each turn.

    python benchmarks/agent_loop.py [--episodes 256] [--repeats 3] [--turns 1 3 6]

The peer is the same loop with `rollout.reuse_kv: false`: each turn re-runs the whole context
(prompt, earlier actions and observations) through the model, as a loop that re-tokenizes the
history and calls `generate` afresh would. A policy of the embedded architecture (0.9M
parameters) is first fine-tuned for a few seconds to call the calculator after every
observation, so every turn ends with its end-of-turn token and an episode of N turns is N calls
(`max_tool_calls = N - 1`: the N-th call ends it). Both variants sample the same tokens (the
table checks it); the table gives, per number of turns, the median wall seconds, tokens sampled
per second, prompt tokens computed (prefill), and the ratios of reuse to recompute.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr_factory.domains import ArithmeticDomain
from rlvr_factory.domains.calculator import ToolCall, answer_call
from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.agent_loop import RolloutConfig, sample_episodes
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.sft import SFTConfig, encode_demonstrations, supervised_train

LEVELS = {1: {"digits": 2, "operands": 2, "ops": "+"}}


def tool_caller(steps: int) -> Policy:
    """The embedded architecture, trained to answer every prompt and observation with another calculator call."""
    seed_everything(0)
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(TinyModelConfig(), len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                             tokenizer.eos_token_id, seed=0)
    policy = Policy(model, tokenizer)
    tasks = ArithmeticDomain(LEVELS, {"train": 32}).generate_tasks()
    demos = []
    for t in tasks:
        calls = [f"{t.prompt.removeprefix('Compute ')}+{k}" for k in range(6)]
        turns = [text for c in calls for text in (f"<calc>{c}</calc>", answer_call(ToolCall(c))[0])]
        demos.append(turns[:-1])
    examples = encode_demonstrations(tokenizer, [t.prompt for t in tasks], demos)
    supervised_train(policy, examples, SFTConfig(steps=steps, batch_size=16, lr=3e-3, warmup_steps=10), desc="train caller")
    policy.model.eval()
    return policy


def run(policy: Policy, turns: int, reuse: bool, episodes: int, sampling: SamplingConfig) -> tuple[float, dict, list]:
    domain = ArithmeticDomain(LEVELS, {"test": episodes // 4}, tool={"enabled": True, "max_tool_calls": turns - 1})
    config = RolloutConfig(max_turns=turns, max_context_tokens=None, reuse_kv=reuse)
    start = time.perf_counter()
    result, stats = sample_episodes(policy, domain, domain.generate_tasks(), 4, config, sampling, desc="bench")
    return time.perf_counter() - start, stats, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=256, help="episodes per run (4 per task)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant, alternating")
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = tool_caller(args.train_steps)
    sampling = SamplingConfig(max_new_tokens=32, temperature=1.0, batch_size=512, seed=0)
    print(f"{args.episodes} episodes per run, {args.repeats} alternating runs per variant, {args.threads} thread(s)\n")
    print("| turns | variant | median s | tokens/s | prefill tokens | sampled tokens | mean turns |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for turns in args.turns:
        seconds = {True: [], False: []}
        last = {}
        for _ in range(args.repeats):
            for reuse in (False, True):
                wall, stats, episodes = run(policy, turns, reuse, args.episodes, sampling)
                seconds[reuse].append(wall)
                last[reuse] = (stats, episodes)
        same = [e.completion_ids for e in last[True][1]] == [e.completion_ids for e in last[False][1]]
        rows = {}
        for reuse in (False, True):
            stats, episodes = last[reuse]
            median = statistics.median(seconds[reuse])
            rows[reuse] = (stats["engine_new_tokens"] / median, stats["engine_prefill_tokens"])
            mean_turns = sum(len(e.turns) for e in episodes) / len(episodes)
            print(f"| {turns} | {'reuse' if reuse else 'recompute'} | {median:.2f} | {rows[reuse][0]:,.0f} | "
                  f"{stats['engine_prefill_tokens']:,.0f} | {stats['engine_new_tokens']:,.0f} | {mean_turns:.2f} |")
        ratios.append((turns, rows[True][0] / rows[False][0], rows[True][1] / rows[False][1], same))
    print("\n| turns | tokens/s, reuse / recompute | prefill tokens, reuse / recompute | same tokens sampled |")
    print("|---|---|---|---|")
    for turns, speed, prefill, same in ratios:
        print(f"| {turns} | {speed:.2f}x | {prefill:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
