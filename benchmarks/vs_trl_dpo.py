"""Seconds per optimizer step on preference pairs: our DPO and reward-model trainers vs TRL's
`DPOTrainer` and `RewardTrainer`.

    pip install -e ".[bench]"   # TRL
    python benchmarks/vs_trl_dpo.py [--pairs 32] [--steps 10] [--model data/06_models/sft_policy]

Both sides get an identical copy of the same tiny Llama (`--model`, e.g. the pipeline's SFT
policy; default: the embedded architecture, freshly initialised), the same embedded arithmetic
pairs (a worked solution preferred to a flawed one), the same tokens (TRL gets the chat-rendered
prompt as text, so neither side re-templates), `--pairs` pairs per step, fp32 on the CPU, AdamW,
no gradient accumulation, no evaluation, no gradient checkpointing (TRL's DPOConfig and RewardConfig
turn it on by default; ours never recomputes activations). DPO: sigmoid loss, beta 0.1; TRL runs twice, with its
default reference model (a forward pass of a frozen copy every step) and with
`precompute_ref_log_probs=True` (what ours always does: the reference's log-probs once, before
training; that pass is outside the timed steps on both sides). Reward model: a one-label
sequence classifier on the same backbone, Bradley-Terry loss. The runs alternate `--repeats`
times (a busy machine slows each alike); each run's first step is a warm-up. The table gives the
median and minimum seconds per step, the speed-up, and the final training loss as a sanity check
that both sides train the same objective.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections import defaultdict

import torch
from transformers import AutoModelForSequenceClassification

from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.models.policy import Policy
from rlvr_factory.models.reward_model import reward_model_from_policy
from rlvr_factory.preferences import SyntheticPairs, pairs_from_frame, pairs_to_frame, synthetic_rows
from rlvr_factory.preferences.contract import PreferencePair
from rlvr_factory.training.dpo import DPOConfig, train_dpo
from rlvr_factory.training.pairs import PairTrainConfig, encode_pairs
from rlvr_factory.training.reward_model import RewardModelConfig, train_reward_model
from rlvr_factory.training.sft import encode_prompts
from vs_trl import LEVELS, make_model

LR = 1e-4
BETA = 0.1


def make_pairs(count: int) -> list[PreferencePair]:
    """`count` embedded arithmetic pairs (no label noise)."""
    domain = ArithmeticDomain(LEVELS, {"train": count}, seed=0)
    rows = synthetic_rows(domain, domain.generate_tasks(), SyntheticPairs(label_noise=0.0))
    return pairs_from_frame(pairs_to_frame([PreferencePair(**r) for r in rows]))


def loop(args) -> PairTrainConfig:
    return PairTrainConfig(steps=args.steps + 1, batch_size=args.pairs, lr=LR, warmup_steps=0, schedule="constant",
                           eval_every=0, weight_decay=0.0)


def run_ours_dpo(model, tokenizer, pairs, args) -> tuple[list[float], float]:
    policy = Policy(model, tokenizer)
    history = train_dpo(policy, encode_pairs(tokenizer, pairs), [], DPOConfig(loop(args), beta=BETA))
    return [r["seconds"] for r in history], history[-1]["loss"]


def run_ours_rm(model, tokenizer, pairs, args) -> tuple[list[float], float]:
    rm = reward_model_from_policy(Policy(model, tokenizer))
    encoded = encode_pairs(tokenizer, pairs)
    history = train_reward_model(rm, encoded, encoded[:1], RewardModelConfig(loop(args)))
    return [r["seconds"] for r in history], history[-1]["loss"]


def _trl_rows(tokenizer, pairs) -> list[dict]:
    """Standard-format rows with the prompt already chat-rendered, so TRL tokenizes the same ids as ours."""
    rendered = [tokenizer.decode(ids) for ids in encode_prompts(tokenizer, [p.prompt for p in pairs])]
    return [{"prompt": r, "chosen": p.chosen, "rejected": p.rejected} for r, p in zip(rendered, pairs)]


class _StepTimes:
    def __init__(self) -> None:
        from transformers import TrainerCallback

        times, losses = self.times, self.losses = [], []

        class Callback(TrainerCallback):
            def on_step_begin(self, *_, **__):
                self.start = time.perf_counter()

            def on_step_end(self, *_, **__):
                times.append(time.perf_counter() - self.start)

            def on_log(self, _args, _state, _control, logs=None, **__):
                if logs and "loss" in logs:
                    losses.append(logs["loss"])

        self.callback = Callback()


def _common(args, output: str) -> dict:
    return dict(output_dir=output, use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=1,
                save_strategy="no", per_device_train_batch_size=args.pairs, gradient_accumulation_steps=1,
                learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                max_steps=args.steps + 1, seed=0, dataloader_num_workers=0, disable_tqdm=True, max_length=None,
                gradient_checkpointing=False)


def run_trl_dpo(model, tokenizer, pairs, args, precompute: bool) -> tuple[list[float], float]:
    from datasets import Dataset
    from trl import DPOConfig as TRLDPOConfig
    from trl import DPOTrainer

    timer = _StepTimes()
    config = TRLDPOConfig(**_common(args, f"{args.trl_output_dir}/dpo"), beta=BETA, loss_type="sigmoid",
                          precompute_ref_log_probs=precompute)
    rows = _trl_rows(tokenizer, pairs) * (args.steps + 2)
    trainer = DPOTrainer(model=model, ref_model=copy.deepcopy(model), args=config, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, callbacks=[timer.callback])
    trainer.train()
    return timer.times, timer.losses[-1]


def run_trl_rm(model, tokenizer, pairs, args) -> tuple[list[float], float]:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    classifier = reward_model_from_policy(Policy(model, tokenizer)).model
    assert isinstance(classifier, AutoModelForSequenceClassification._model_mapping[type(classifier.config)])
    timer = _StepTimes()
    rows = [{"chosen": r["prompt"] + r["chosen"], "rejected": r["prompt"] + r["rejected"]}
            for r in _trl_rows(tokenizer, pairs)] * (args.steps + 2)
    trainer = RewardTrainer(model=classifier, args=RewardConfig(**_common(args, f"{args.trl_output_dir}/rm")),
                            train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[timer.callback])
    trainer.train()
    return timer.times, timer.losses[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=32, help="pairs per optimizer step")
    parser.add_argument("--steps", type=int, default=10, help="timed steps after one warm-up step")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each trainer")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both sides)")
    parser.add_argument("--trl-output-dir", default="/tmp/vs_trl_dpo")
    parser.add_argument("--model", default=None,
                        help="policy directory, e.g. data/06_models/sft_policy (default: a fresh tiny Llama)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pairs = make_pairs(args.pairs * (args.steps + 1))
    model, tokenizer = make_model(args.model)
    runners = {
        ("DPO", "ours (reference log-probs precomputed)"): run_ours_dpo,
        ("DPO", "trl DPOTrainer, precompute_ref_log_probs"): lambda *a: run_trl_dpo(*a, precompute=True),
        ("DPO", "trl DPOTrainer, reference model"): lambda *a: run_trl_dpo(*a, precompute=False),
        ("reward model", "ours"): run_ours_rm,
        ("reward model", "trl RewardTrainer"): run_trl_rm,
    }
    steps: dict[tuple, list[float]] = defaultdict(list)
    losses: dict[tuple, list[float]] = defaultdict(list)
    for _ in range(args.repeats):
        for key, run in runners.items():
            torch.manual_seed(0)
            times, loss = run(copy.deepcopy(model), copy.deepcopy(tokenizer), pairs, args)
            steps[key] += times[1:]  # the first step of each run is a warm-up
            losses[key].append(loss)

    import trl
    print(f"one optimizer step on {args.pairs} preference pairs, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M-parameter Llama ({args.model or 'fresh init'}), "
          f"fp32 CPU, {args.threads} thread(s), trl {trl.__version__}; {args.repeats} alternating runs of "
          f"{args.steps} timed steps each")
    print("| task | trainer | median s/step | min s/step | speed-up of ours (median) | final train loss |")
    print("|---|---|---|---|---|---|")
    ours = {"DPO": ("DPO", "ours (reference log-probs precomputed)"), "reward model": ("reward model", "ours")}
    for key in runners:
        median = statistics.median(steps[key])
        ratio = median / statistics.median(steps[ours[key[0]]])
        print(f"| {key[0]} | {key[1]} | {median:.4f} | {min(steps[key]):.4f} | "
              f"{'—' if key == ours[key[0]] else f'{ratio:.2f}x'} | {statistics.mean(losses[key]):.4f} |")


if __name__ == "__main__":
    main()
