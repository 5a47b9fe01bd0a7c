"""Launch `kedro run` data-parallel on a Ray cluster instead of torchrun.

    python -m rlvr_factory.ray_launch --workers 4 --gpu -- --pipeline=rlvr --params=rl.rounds=2

Ray Train starts one worker per rank (placed by Ray across the cluster's nodes), joins them in
one torch process group (gloo, or NCCL with `--gpu`) and sets the variables torchrun sets
(`WORLD_SIZE`, `RANK`, `LOCAL_RANK`); each worker then runs the same `kedro run` in the project
directory, exactly as under torchrun (rank 0 writes files and MLflow). Every node needs the
project at the same path (a shared file system, or the same checkout) and the same environment.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path
from typing import Sequence


def _kedro_run(project: str, kedro_args: list[str]) -> None:
    """One rank: `kedro run <kedro_args>` in `project`, inside the process group Ray Train made."""
    from kedro.framework.cli.cli import KedroCLI

    os.chdir(project)
    KedroCLI(Path(project))(args=["run", *kedro_args], standalone_mode=False)


def launch(kedro_args: Sequence[str], workers: int, gpu: bool = False, address: str | None = None,
           project: Path | None = None) -> None:
    """Run `kedro run <kedro_args>` on `workers` Ray Train workers (one rank each, a GPU each with `gpu`)."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    root = str((project or Path.cwd()).resolve())
    logging_config = Path(root) / "conf/logging.yml"  # the console kedro run shows, not Kedro's default
    env_vars = {"KEDRO_LOGGING_CONFIG": str(logging_config)} if logging_config.exists() else {}
    ray.init(address=address, ignore_reinit_error=True, runtime_env={"env_vars": env_vars})
    trainer = TorchTrainer(
        partial(_kedro_run, root, list(kedro_args)),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpu),
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        run_config=RunConfig(storage_path=str(Path(root) / "data/09_ray"), name="kedro_run"),
    )
    trainer.fit()


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: launcher options, then `--` and `kedro run`'s own options."""
    parser = argparse.ArgumentParser(prog="python -m rlvr_factory.ray_launch", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, required=True, help="ranks (Ray Train workers)")
    parser.add_argument("--gpu", action="store_true", help="one GPU per worker, NCCL (default: CPU, gloo)")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start or join a local one)")
    parser.add_argument("kedro_args", nargs=argparse.REMAINDER, help="-- then kedro run's options")
    args = parser.parse_args(argv)
    launch([a for a in args.kedro_args if a != "--"], args.workers, args.gpu, args.address)


if __name__ == "__main__":
    main()
