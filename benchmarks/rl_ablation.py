"""Held-out accuracy and seconds per round of each advantage estimator, and of dynamic sampling.

    python benchmarks/rl_ablation.py [--rounds 6] [--prompts-per-round 32] [--validation-size 200]

Runs the real Kedro project on the embedded arithmetic default in a scratch directory: the
`curate`, `base_model` and `sft` pipelines once (the base model is reused from this
checkout's cache when it is there), then the `rl` pipeline once per variant, from the same
SFT policy with the same seeds: GRPO, Dr. GRPO, RLOO, REINFORCE++, GRPO with DAPO's
dynamic sampling, and GRPO with per-component (GDPO) normalisation. For each it prints the
final round's validation greedy accuracy, the final policy's greedy accuracy on the test
split, and the seconds per round (rollout + verify + update, and the wall time including
the per-round validation).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import mlflow
import pandas as pd
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from rlvr_factory.domains import get_domain, tasks_from_frame
from rlvr_factory.evaluation import greedy_accuracy
from rlvr_factory.models.policy import load_policy
from rlvr_factory.pipelines.rl.loop import RoundLoopRunner

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "GRPO": {"update": {"advantage_estimator": "grpo"}},
    "Dr. GRPO": {"update": {"advantage_estimator": "dr_grpo"}},
    "RLOO": {"update": {"advantage_estimator": "rloo"}},
    "REINFORCE++": {"update": {"advantage_estimator": "reinforce_pp"}},
    "GRPO + dynamic sampling": {"update": {"advantage_estimator": "grpo"}, "dynamic_sampling": {"enabled": True}},
    "GRPO + per-component (GDPO)": {"update": {"advantage_estimator": "grpo", "component_normalisation": True}},
}


def scratch_project(root: Path) -> Path:
    """The real conf/ and pyproject.toml in `root`, with its own data/ and MLflow store."""
    shutil.copytree(ROOT / "conf", root / "conf")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "src").mkdir()
    (root / "mlruns").mkdir()
    return root


def run(project: Path, pipeline: str, params: dict) -> float:
    """`kedro run --pipeline=<pipeline>` inside `project`; returns its wall time."""
    cwd = os.getcwd()
    os.chdir(project)
    start = time.perf_counter()
    try:
        bootstrap_project(project)
        with KedroSession.create(project_path=project, runtime_params=params) as session:
            session.run(pipeline_names=[pipeline], runner=RoundLoopRunner())
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        os.chdir(cwd)
    return time.perf_counter() - start


def test_accuracy(project: Path, policy_dir: str, params: dict) -> float:
    """Greedy accuracy of a saved policy on the test split, through the library's evaluation."""
    with KedroSession.create(project_path=project, runtime_params=params) as session:
        conf = session.load_context().params
    tasks = tasks_from_frame(pd.read_parquet(project / "data/05_model_input/test_tasks.parquet"))
    policy = load_policy(project / policy_dir, device="cpu")
    # the session hands blocks typed (Kedro's typed parameters), as the nodes receive them
    return greedy_accuracy(policy, tasks, get_domain(conf["domain"]), conf["verify"], conf["evaluate"].sampling)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--prompts-per-round", type=int, default=32)
    parser.add_argument("--validation-size", type=int, default=200)
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rl_ablation_"))
    project = scratch_project(workdir / "project")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{project}/mlruns/mlflow.db"
    base = {
        "model": {"embedded": {"cache_dir": str(ROOT / "data/06_models/base")}},
        "evaluate": {"validation_size": args.validation_size},
        "rl": {"rounds": args.rounds, "prompts_per_round": args.prompts_per_round, "checkpoint_every": 0},
    }
    for stage in ("curate", "base_model", "sft"):
        run(project, stage, base)
    rows = [("SFT (start)", float("nan"), test_accuracy(project, "data/06_models/sft_policy", base), float("nan"),
             float("nan"))]
    for name, variant in VARIANTS.items():
        params = {**base, "rl": {**base["rl"], **variant, "update": variant["update"]}}
        wall = run(project, "rl", params)
        rounds = [json.loads((project / f"data/08_reporting/rounds/round_{k:03d}.json").read_text())
                  for k in range(args.rounds)]
        train = sum(r["rollout_seconds"] + r["verify_seconds"] + r["update_seconds"] for r in rounds) / args.rounds
        rows.append((name, rounds[-1]["val_greedy_accuracy"], test_accuracy(project, "data/06_models/rl_policy", params),
                     train, wall / args.rounds))
        print(f"done: {name}", flush=True)
    print(f"\n{args.rounds} rounds x {args.prompts_per_round} prompts x 8 samples; validation on "
          f"{args.validation_size} tasks after each round; test split greedy accuracy of the final policy")
    print("| variant | final val greedy acc | test greedy acc | s/round (rollout+verify+update) | s/round (wall) |")
    print("|---|---|---|---|---|")
    for name, val, test, train, wall in rows:
        cells = [f"{val:.1%}" if val == val else "-", f"{test:.1%}", f"{train:.1f}" if train == train else "-",
                 f"{wall:.1f}" if wall == wall else "-"]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
