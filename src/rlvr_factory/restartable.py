"""`kedro run` that picks up where a failed attempt of the same launch stopped: the entry point for launchers that
restart a run when a rank dies (torchrun's `--max-restarts`, Ray Train's `FailureConfig`, `ray_launch --max-failures`).

    torchrun --standalone --nproc_per_node=2 --max-restarts=3 -m rlvr_factory.restartable --pipeline=rlvr

Each attempt is `kedro run <args>`. An attempt that finds RL checkpoints written since the launch began (an earlier
attempt's) resumes at the round after the last one whose inputs are all on disk, exactly as a person would resume it
(`--from-nodes=round.rollout --params=rl.resume_from=N`); with none it runs from the start. Every random choice is
seeded from the parameters, so a restarted run ends with an uninterrupted one's results. Checkpoints older than the
launch (another run's, in the same `data/`) are never resumed from.

The launch's start is recorded on each node in the temporary directory (`rlvr-launch-<run id>`) by the first
attempt's local rank 0 under torchrun; `ray_launch` passes it to its workers itself. Every rank looks for the
checkpoints on its own disk: ranks on several machines need the project's `data/` on a shared file system.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def _marker() -> Path:
    return Path(tempfile.gettempdir()) / f"rlvr-launch-{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}"


def torchrun_launch_time() -> float:
    """When this torchrun launch began: recorded by the first attempt's local rank 0, read by later attempts (the
    same `TORCHELASTIC_RUN_ID`). Outside torchrun, now."""
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        return time.time()
    marker = _marker()
    if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) == 0:
        now = time.time()
        if os.environ.get("LOCAL_RANK", "0") == "0":
            staging = marker.with_name(f"{marker.name}.{os.getpid()}")
            staging.write_text(repr(now))
            staging.replace(marker)
        return now
    try:
        return float(marker.read_text())
    except (OSError, ValueError):  # no record of the launch: resume nothing rather than another run's checkpoint
        return float("inf")


def _parse(kedro_args: Sequence[str]):
    """`kedro run`'s own parse of `kedro_args` (its click command): the options' values by name."""
    from kedro.framework.cli.project import run

    return run.make_context("run", list(kedro_args), resilient_parsing=False).params


def resume_round(project: Path, kedro_args: Sequence[str], since: float) -> int:
    """The round a run of `kedro run <kedro_args>` in `project` resumes at: the one after the last RL checkpoint
    written after `since` whose round can start from what is on disk (its checkpoint, the earlier rounds' pass
    rates, domain levels and stats); 0 (from the start) if there is none or the run has no RL rounds."""
    from kedro.framework.project import pipelines, settings
    from kedro.framework.startup import bootstrap_project
    from kedro.io import DataCatalog

    from rlvr_factory.pipelines.rl.pipeline import RLShape, _checkpointed, round_block
    from rlvr_factory.round_files import ROUND, round_name, round_of

    options = _parse(kedro_args)
    if options.get("from_nodes") or "resume_from" in ((options.get("params") or {}).get("rl") or {}):
        return 0  # the command chose where it starts: every attempt starts there
    bootstrap_project(project)
    # the run's configuration as its session would load it, without a session: the project's hooks (joining the
    # process group among them) belong to the run itself
    loader = settings.CONFIG_LOADER_CLASS(conf_source=str(project / settings.CONF_SOURCE), env=options.get("env"),
                                          runtime_params=options.get("params") or None, **settings.CONFIG_LOADER_ARGS)
    parameters = loader["parameters"]
    catalog = DataCatalog.from_config(loader["catalog"])
    names = options.get("pipelines") or [options.get("pipeline") or "__default__"]
    if "rl" not in parameters or not any(n.namespace == ROUND for name in names for n in pipelines[name].nodes):
        return 0  # a run without RL rounds (`--pipeline=sft`) has no checkpoint to resume from
    shape = RLShape.from_parameters(parameters)
    plans = shape.plans()
    for k in sorted((j + 1 for j in range(shape.rounds - 1) if _checkpointed(j, shape.checkpoint_every)), reverse=True):
        checkpoint = catalog.get(f"{round_name(k - 1)}.checkpoint", fallback_to_runtime_pattern=True)
        path = getattr(checkpoint, "_path", None)  # a PolicyDataset's directory (conf/base/catalog.yml)
        if path is None or not (Path(path) / "config.json").exists() or (Path(path) / "config.json").stat().st_mtime < since:
            continue
        needed = {i for i in round_block(k, shape, plans).inputs() if (r := round_of(i)) is not None and r < k}
        needed |= {f"{round_name(j)}.stats" for j in range(k)}
        if all(catalog.get(name, fallback_to_runtime_pattern=True).exists() for name in needed):
            return k
    return 0


def resumed_args(kedro_args: Sequence[str], k: int) -> list[str]:
    """`kedro_args` resuming the RL rounds at round `k` (unchanged for 0)."""
    if not k:
        return list(kedro_args)
    args, extra, added = list(kedro_args), f"rl.resume_from={k}", False
    for at, arg in enumerate(args):
        if arg.startswith("--params="):
            args[at], added = f"{arg},{extra}", True
        elif arg == "--params" and at + 1 < len(args):
            args[at + 1], added = f"{args[at + 1]},{extra}", True
    return [*args, *([] if added else [f"--params={extra}"]), "--from-nodes=round.rollout"]


def run(project: Path, kedro_args: Sequence[str], since: float) -> None:
    """One attempt: `kedro run <kedro_args>` in `project`, resumed at the round `resume_round` finds."""
    from kedro.framework.cli.cli import KedroCLI

    os.chdir(project)  # the catalog's paths are the project's
    k = resume_round(project, kedro_args, since)
    if k:
        log.warning("restarted: resuming the RL rounds at round %d, after the last checkpoint this launch wrote", k)
    KedroCLI(project)(args=["run", *resumed_args(kedro_args, k)], standalone_mode=False)


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: `kedro run`'s own options."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run(Path.cwd(), list(sys.argv[1:] if argv is None else argv), torchrun_launch_time())


if __name__ == "__main__":
    main()
