"""Does RL improve on SFT in an environment from another package? Held-out seeds, paired tests.

    python benchmarks/env_learning.py --env textarena [--samples 8] [--params rl.rounds=12]

Runs `kedro run --pipeline=rlvr --env=ENV` (the real project, in a scratch directory with its own data/
and MLflow store; `--params` as `kedro run` takes them), then plays the SFT and the RL policy on every task
of the held-out test split (tasks are the environment's seeds): one greedy episode each and `--samples`
sampled ones (T=1). It prints the success rates and two paired tests over the tasks: McNemar's exact test
on the greedy outcomes (the tasks one policy wins and the other loses) and the Wilcoxon signed-rank test
on the per-task pass@1, with the run's wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from scipy.stats import binomtest, wilcoxon

ROOT = Path(__file__).resolve().parents[1]


def run_pipeline(project: Path, env: str, params: str) -> float:
    """`kedro run --pipeline=rlvr --env=ENV [--params ...]` in `project`; its wall time in seconds."""
    command = [sys.executable, "-m", "kedro", "run", "--pipeline=rlvr", f"--env={env}"]
    start = time.perf_counter()
    subprocess.run(command + ([f"--params={params}"] if params else []), cwd=project, check=True)
    return time.perf_counter() - start


def outcomes(project: Path, env: str, policy: str, samples: int) -> tuple[list[bool], list[float]]:
    """The policy's greedy outcome and sampled pass@1 on each test task of the finished run in `project`."""
    from dataclasses import replace

    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rlvr_factory.domains import get_domain, tasks_from_frame
    from rlvr_factory.evaluation import correctness
    from rlvr_factory.models.policy import load_policy

    bootstrap_project(project)
    with KedroSession.create(project_path=project, env=env) as session:
        conf = session.load_context().params
    data = project / "data/envs" / env
    tasks = tasks_from_frame(pd.read_parquet(data / "05_model_input/test_tasks.parquet"))
    loaded = load_policy(data / "06_models" / policy, device="cpu")
    domain, sampling = get_domain(conf["domain"]), conf["evaluate"].sampling
    greedy = correctness(loaded, tasks, domain, conf["verify"], 1, replace(sampling, temperature=0.0), "greedy",
                         conf["rollout"])
    sampled = correctness(loaded, tasks, domain, conf["verify"], samples, sampling, "sampled", conf["rollout"])
    return [g[0] for g in greedy], [sum(s) / len(s) for s in sampled]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="textarena", help="the configuration environment (conf/ENV)")
    parser.add_argument("--samples", type=int, default=8, help="sampled episodes per task for pass@1")
    parser.add_argument("--params", default="", help="runtime parameters for the run, as `kedro run` takes them")
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    project = Path(args.workdir or tempfile.mkdtemp(prefix="env_learning_")) / "project"
    if not project.exists():
        project.mkdir(parents=True)
        shutil.copytree(ROOT / "conf", project / "conf")
        shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
        (project / "mlruns").mkdir()
        (project / "src").mkdir()  # Kedro looks for the package source here; the installed one runs
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{project}/mlruns/mlflow.db"  # the scratch project's own store
    wall = run_pipeline(project, args.env, args.params)
    (sft_greedy, sft_pass), (rl_greedy, rl_pass) = (outcomes(project, args.env, p, args.samples)
                                                   for p in ("sft_policy", "rl_policy"))
    n = len(sft_greedy)
    rl_only = sum(r and not s for s, r in zip(sft_greedy, rl_greedy))
    sft_only = sum(s and not r for s, r in zip(sft_greedy, rl_greedy))
    mcnemar = binomtest(rl_only, rl_only + sft_only, 0.5).pvalue if rl_only + sft_only else 1.0
    differences = [r - s for s, r in zip(sft_pass, rl_pass)]
    signed = wilcoxon(differences).pvalue if any(differences) else 1.0
    print(f"\n{args.env}: {n} held-out seeds (test split); run {wall / 60:.1f} min; pass@1 over {args.samples} samples")
    print("| policy | greedy success | pass@1 (T=1) |")
    print("|---|---|---|")
    print(f"| SFT | {sum(sft_greedy) / n:.1%} | {sum(sft_pass) / n:.1%} |")
    print(f"| RL | {sum(rl_greedy) / n:.1%} | {sum(rl_pass) / n:.1%} |")
    print(f"greedy: RL wins {rl_only} seeds SFT loses, SFT wins {sft_only} RL loses; McNemar exact p = {mcnemar:.2g}")
    print(f"pass@1: mean per-seed gain {sum(differences) / n:+.3f}; Wilcoxon signed-rank p = {signed:.2g}")


if __name__ == "__main__":
    main()
