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
import time
from functools import partial
from pathlib import Path
from typing import Sequence


def _kedro_run(project: str, kedro_args: list[str], launched_at: float) -> None:
    """One rank: `kedro run <kedro_args>` in `project`, inside the process group Ray Train made; an attempt after
    a failed one resumes at the round after the last checkpoint written since `launched_at` (`restartable`)."""
    from rlvr_factory import restartable

    restartable.run(Path(project), kedro_args, launched_at)


def launch(kedro_args: Sequence[str], workers: int, gpu: bool = False, address: str | None = None,
           project: Path | None = None, max_failures: int = 0) -> None:
    """Run `kedro run <kedro_args>` on `workers` Ray Train workers (one rank each, a GPU each with `gpu`); when a
    worker dies, up to `max_failures` times, Ray Train starts them all again and the run resumes from its last
    RL checkpoint (`rlvr_factory.restartable`)."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    root = str((project or Path.cwd()).resolve())
    logging_config = Path(root) / "conf/logging.yml"  # the console kedro run shows, not Kedro's default
    env_vars = {"KEDRO_LOGGING_CONFIG": str(logging_config)} if logging_config.exists() else {}
    ray.init(address=address, ignore_reinit_error=True, runtime_env={"env_vars": env_vars})
    trainer = TorchTrainer(
        partial(_kedro_run, root, list(kedro_args), time.time()),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpu),
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        run_config=RunConfig(storage_path=str(Path(root) / "data/09_ray"), name="kedro_run",
                             failure_config=FailureConfig(max_failures=max_failures)),
    )
    trainer.fit()


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: launcher options, then `--` and `kedro run`'s own options."""
    parser = argparse.ArgumentParser(prog="python -m rlvr_factory.ray_launch", description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, required=True, help="ranks (Ray Train workers)")
    parser.add_argument("--gpu", action="store_true", help="one GPU per worker, NCCL (default: CPU, gloo)")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start or join a local one)")
    parser.add_argument("--max-failures", type=int, default=0,
                        help="times to start the workers again after one dies, resuming from the last RL checkpoint")
    parser.add_argument("kedro_args", nargs=argparse.REMAINDER, help="-- then kedro run's options")
    args = parser.parse_args(argv)
    launch([a for a in args.kedro_args if a != "--"], args.workers, args.gpu, args.address,
           max_failures=args.max_failures)


if __name__ == "__main__":
    main()
