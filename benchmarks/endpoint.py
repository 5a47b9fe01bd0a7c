"""The OpenAI-compatible endpoint against the engine it serves, in the same run: what agents that call an OpenAI
client pay for sampling through HTTP, one request at a time, instead of handing the engine a batch.

    python benchmarks/endpoint.py [--requests 64] [--concurrency 1 8 64] [--max-tokens 32] [--width 128] [--repeats 2]

The model is a freshly initialised embedded Llama (`models/tiny.py`, byte vocabulary; 128: the embedded ~1M
model) on the transformers engine. `--requests` chat prompts are sampled (T=1, `--max-tokens` each, random
weights: every sample runs to the budget) first by one `engine.generate` call on them all (the agent loop's
way: the baseline), then through the endpoint by `--concurrency` client threads of the real `openai` client,
each sending its share one request after another. The table gives the best seconds of `--repeats`, tokens
per second, the mean engine batch the endpoint formed, and the ratio to the baseline's tokens per second.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine


def policy_of(width: int) -> Policy:
    tokenizer = build_byte_tokenizer()
    config = TinyModelConfig(hidden_size=width, intermediate_size=3 * width, max_positions=256)
    model = build_tiny_model(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                             tokenizer.eos_token_id, seed=0)
    model.eval()
    return Policy(model, tokenizer)


def messages_of(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"What is {i} + {2 * i + 7}? Answer with the number."}] for i in range(n)]


def direct(policy: Policy, chats: list[list[dict]], max_tokens: int) -> tuple[float, int]:
    engine = TransformersEngine(policy, desc="direct")
    contexts = [list(policy.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True)["input_ids"])
                for c in chats]
    start = time.perf_counter()
    generations, _ = engine.generate([Request(c) for c in contexts], SamplingConfig(max_new_tokens=max_tokens))
    return time.perf_counter() - start, sum(len(g.token_ids) for g in generations)


def through_endpoint(policy: Policy, chats: list[list[dict]], max_tokens: int, concurrency: int
                     ) -> tuple[float, int, float]:
    config = EndpointConfig(max_batch=len(chats), batch_wait_s=0.005)
    with Endpoint(TransformersEngine(policy, desc="endpoint"), policy.tokenizer, config) as endpoint:
        client = openai.OpenAI(base_url=endpoint.url + "/v1", api_key="none", max_retries=0)

        def worker(share: list[list[dict]]) -> int:
            return sum(client.chat.completions.create(model="policy", messages=m, max_tokens=max_tokens,
                                                      temperature=1.0).usage.completion_tokens for m in share)

        def agents() -> int:
            shares = [chats[k::concurrency] for k in range(concurrency)]
            with ThreadPoolExecutor(concurrency) as pool:
                return sum(pool.map(worker, shares))

        start = time.perf_counter()
        tokens = endpoint.run(agents)
        seconds = time.perf_counter() - start
        batches = endpoint.server.batcher.batches
    return seconds, tokens, sum(batches) / len(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    policy, chats = policy_of(args.width), messages_of(args.requests)
    params = sum(p.numel() for p in policy.model.parameters())
    best = min((direct(policy, chats, args.max_tokens) for _ in range(args.repeats)), key=lambda r: r[0])
    base_rate = best[1] / best[0]
    print(f"{args.requests} chat requests x {args.max_tokens} tokens, {params / 1e6:.1f}M-parameter Llama, "
          f"{torch.get_num_threads()} threads\n")
    print("| how | concurrency | seconds | tokens/s | mean engine batch | tokens/s vs one generate call |")
    print("|---|---|---|---|---|---|")
    print(f"| one `engine.generate` call (baseline) | - | {best[0]:.2f} | {base_rate:.0f} | {args.requests} | 1.00x |")
    for c in args.concurrency:
        runs = [through_endpoint(policy, chats, args.max_tokens, c) for _ in range(args.repeats)]
        seconds, tokens, batch = min(runs, key=lambda r: r[0])
        rate = tokens / seconds
        print(f"| endpoint, `openai` client threads | {c} | {seconds:.2f} | {rate:.0f} | {batch:.1f} | "
              f"{rate / base_rate:.2f}x |")


if __name__ == "__main__":
    main()
