"""`rlvr serve`: a policy checkpoint behind the OpenAI-compatible endpoint (`rollout/endpoint.py`), every call recorded.

    rlvr serve --model DIR [--host H] [--port P] [--record CALLS.jsonl] [--max-batch N] [--batch-wait-ms MS]
               [--max-tokens N] [--device D] [--dtype T] [--name NAME]

Any OpenAI client (base URL ``http://H:P/v1``) and `verifiers`' training client (``/inference/v1/generate``)
sample from the checkpoint; `--record` appends each call (context ids, sampled ids, log-probs) to a JSONL
file as it is served.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve a checkpoint on an OpenAI-compatible endpoint",
                                description=__doc__.split("\n\n")[0])
    serve.add_argument("--model", required=True, help="a saved policy: an HF model directory with its tokenizer")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port (0: a free one, printed)")
    serve.add_argument("--record", default=None, help="append every call to this JSONL file")
    serve.add_argument("--max-batch", type=int, default=64, help="requests sampled in one engine call at most")
    serve.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long a batch waits for more requests")
    serve.add_argument("--max-tokens", type=int, default=256, help="a request's token budget when it names none")
    serve.add_argument("--device", default="auto", help="cpu, cuda, ... (auto: CUDA when there is one)")
    serve.add_argument("--dtype", default="float32", help="the weights' dtype (auto: the checkpoint's)")
    serve.add_argument("--name", default=None, help="the model id /v1/models lists (default: the directory's name)")
    serve.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlvr_factory.audit.command import AuditUsageError
    from rlvr_factory.models.policy import load_policy
    from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig, Recorder
    from rlvr_factory.rollout.hf import TransformersEngine

    if args.max_batch < 1 or args.batch_wait_ms < 0 or args.max_tokens < 1 or not 0 <= args.port < 65536:
        raise AuditUsageError("--max-batch and --max-tokens must be at least 1, --batch-wait-ms at least 0, "
                              "--port in 0..65535")
    try:
        policy = load_policy(args.model, device=args.device, dtype=args.dtype)
    except (OSError, ValueError) as e:
        raise AuditUsageError(f"cannot load {args.model}: {e}") from None
    config = EndpointConfig(model_name=args.name or Path(args.model).resolve().name, max_batch=args.max_batch,
                            batch_wait_s=args.batch_wait_ms / 1000, default_max_tokens=args.max_tokens)
    try:
        endpoint = Endpoint(TransformersEngine(policy, desc="serve"), policy.tokenizer, config,
                            Recorder(args.record), host=args.host, port=args.port)
    except OSError as e:
        raise AuditUsageError(f"cannot listen on {args.host}:{args.port}: {e}") from None
    print(f"serving {config.model_name} on {endpoint.url}/v1 (OpenAI) and {endpoint.url}/inference/v1/generate"
          + (f"; recording calls to {args.record}" if args.record else ""), file=sys.stderr, flush=True)
    endpoint.serve_forever()
    return 0
