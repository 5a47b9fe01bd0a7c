"""Evaluate: held-out accuracy of the SFT and RL policies, and the report."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from rlvr_factory.domain_report import domain_gains, gain_summary
from rlvr_factory.domains import DomainConfig, get_domain, tasks_from_frame
from rlvr_factory.evaluation import evaluate_policy
from rlvr_factory.models.policy import Policy
from rlvr_factory.parameters import EvaluateConfig
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.verification import VerifyConfig


def evaluate_on_test(
    policy: Policy, test_tasks: pd.DataFrame, domain: DomainConfig, verify: VerifyConfig, evaluate: EvaluateConfig,
    rollout: RolloutConfig,
) -> dict:
    """Greedy pass@1 and sampled pass@k of one policy's episodes (`rollout.*`) on the test split."""
    seed_everything(evaluate.seed)
    sampling = replace(evaluate.sampling, seed=evaluate.seed)
    return evaluate_policy(policy, tasks_from_frame(test_tasks), get_domain(domain), verify, sampling, evaluate.k,
                           rollout)


def build_report(sft_eval: dict, rl_eval: dict, round_history: list[dict]) -> tuple[dict, dict]:
    """`metrics.json` (SFT vs RL on test, the per-domain table sorted by gain, the per-round curve)
    and its MLflow metrics."""
    val_curve = [r["val_greedy_accuracy"] for r in round_history]
    domains = domain_gains(sft_eval, rl_eval, round_history[-1])
    report = {
        "sft": sft_eval,
        "rl": rl_eval,
        "domains": domains,
        "domain_summary": gain_summary(domains),
        "rl_minus_sft_greedy_accuracy": rl_eval["greedy_accuracy"] - sft_eval["greedy_accuracy"],
        "rounds": len(round_history),
        "best_round_val_greedy_accuracy": max(val_curve),
        "final_val_greedy_accuracy": val_curve[-1],
        "round_history": round_history,
    }
    flat = {f"{stage}.{k}": v for stage in ("sft", "rl") for k, v in report[stage].items()}
    flat["rl_minus_sft_greedy_accuracy"] = report["rl_minus_sft_greedy_accuracy"]
    flat.update({f"domains.{k}": v for k, v in report["domain_summary"].items()})
    metrics = {k.replace("@", "_at_"): {"value": float(v), "step": 0} for k, v in flat.items()}
    return report, metrics

