"""How the cost of a run grows with `rl.rounds`: time to the first node, the framework's own cost per round, and
peak memory, at 20, 200, 2,000 and 5,000 rounds (issue 45's table).

    python benchmarks/rounds_scale.py [--rounds 20 200 2000 5000] [--full-up-to 200] [--timeout 600]

Each size runs in a fresh process (`--child`), in a scratch copy of this project's configuration, through a
`KedroSession` like `kedro run --pipelines=rlvr` with a timing hook beside the project's own:

* **first node**: `kedro run --pipelines=rlvr --params=rl.rounds=N --to-nodes=curate_tasks`, the command a user
  tries first; the seconds from the process's start to the start of its first node (building the pipeline,
  validating and filtering it, the catalog and the session), and its ratio to the smallest size's;
* **per round**: a whole minimal run (the embedded model at the test suite's tiny size, 1 prompt x 2 samples a
  round) for sizes up to `--full-up-to`: the rounds' wall time less the time inside their nodes' functions (the
  runner's scheduling, dataset loads and saves, hooks, MLflow logging), per round, over the first and over the
  last tenth of the rounds (flat in the round index when the two agree);
* **memory**: the child process's peak resident set (VmHWM), for the whole run where it ran, else for the
  first-node run; and, in a whole run, its resident set (VmRSS) after each round's update, the median over the
  first and over the last tenth of the rounds (flat in the round index when the two agree); and below the
  table, for the largest whole run, the nodes during which the peak grew most (where a peak comes from).

A size that does not reach its first node within `--timeout` seconds is reported as `> timeout`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.monotonic()  # the child's start, for its time to the first node

from rlvr_factory.round_files import round_of  # noqa: E402 (after STARTED: the child's time counts its imports)
ROOT = Path(__file__).resolve().parents[1]

# The test suite's tiny sizes (tests/pipelines/conftest.py) with a minimal round: 1 prompt x 2 samples.
MINIMAL = {
    "domain": {"splits": {"train": 200, "validation": 20, "test": 20}},
    "model": {"embedded": {
        "corpus_size": 300,
        "architecture": {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2},
        "pretrain": {"steps": 10, "batch_size": 16, "warmup_steps": 2}}},
    "sft": {"num_examples": 50, "train": {"steps": 5, "batch_size": 8, "warmup_steps": 2}},
    "rl": {"prompts_per_round": 1, "samples_per_prompt": 2, "update": {"minibatch_size": 2}},
    "evaluate": {"k": 2, "validation_size": 2},
    "curate": {"audit": {"enabled": False}},
}


class Timing:
    """A Kedro hook: when the first node started, and each node's start and end."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.nodes: list[tuple[str, float, float]] = []
        self.resident: list[float] = []  # MB after each round's update
        self.peak_growth: dict[str, float] = {}  # MB the peak resident set grew during (or before) each node, rounds' summed
        self._start: dict[str, float] = {}
        self._peak = _status_mb("VmHWM")

    def before_node_run(self, node) -> None:  # noqa: ANN001  (Kedro's hook spec)
        now = time.monotonic()
        if self.first is None:
            self.first = now - STARTED
        self._start[node.name] = now
        self._grew(f"before {_kind(node.name)}")  # between the previous node and this one: loading its inputs, ...

    def after_node_run(self, node) -> None:  # noqa: ANN001
        self.nodes.append((node.name, self._start.pop(node.name), time.monotonic()))
        if node.name.endswith(".update"):
            self.resident.append(_status_mb("VmRSS"))
        self._grew(_kind(node.name))

    def _grew(self, where: str) -> None:
        peak = _status_mb("VmHWM")
        if peak > self._peak:
            self.peak_growth[where] = self.peak_growth.get(where, 0.0) + peak - self._peak
        self._peak = peak


def _kind(name: str) -> str:
    """A node's name with its round's as `round_NNN` (`round_003.update`: `round_NNN.update`; `round_curves` as it is)."""
    return "round_NNN." + name.split(".", 1)[1] if round_of(name) is not None else name


def _status_mb(field: str) -> float:
    """This process's `field` of /proc/self/status now (VmRSS: resident set, VmHWM: its peak), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _hook(timing: Timing):
    from kedro.framework.hooks import hook_impl

    class Hook:
        @hook_impl
        def before_node_run(self, node):  # noqa: ANN001
            timing.before_node_run(node)

        @hook_impl
        def after_node_run(self, node):  # noqa: ANN001
            timing.after_node_run(node)

    return Hook()


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _overhead(nodes: list[tuple[str, float, float]], rounds: int) -> dict[str, float]:
    """Per round, the rounds' wall time less the time inside their nodes, over the first and the last tenth."""
    by_round: dict[int, list[tuple[float, float]]] = {}
    for name, start, end in nodes:
        index = round_of(name)  # `round_003.update`, not `round_curves`
        if index is not None:
            by_round.setdefault(index, []).append((start, end))
    window = max(1, rounds // 10)

    def per_round(indices: list[int]) -> float:
        # from the end of the round before the window to the end of its last round: every gap is the framework's
        begin = max(e for s, e in by_round[indices[0] - 1]) if indices[0] > 0 else min(s for s, e in by_round[0])
        end = max(e for s, e in by_round[indices[-1]])
        inside = sum(e - s for k in indices for s, e in by_round[k])
        return (end - begin - inside) / len(indices)

    return {"first_ms": 1000 * per_round(list(range(window))),
            "last_ms": 1000 * per_round(list(range(rounds - window, rounds)))}


def child(rounds: int, mode: str, project: Path, out: Path) -> None:
    """One run in `project`, its timings written to `out` as JSON."""
    import mlflow
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rlvr_factory.pipelines.rl.loop import RoundLoopRunner

    timing = Timing()
    params = _merge(MINIMAL, {"rl": {"rounds": rounds}})
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{project}/mlruns/mlflow.db"
    os.chdir(project)
    bootstrap_project(project)
    with KedroSession.create(project_path=project, runtime_params=params) as session:
        session._hook_manager.register(_hook(timing))
        session.run(pipeline_names=["rlvr"], runner=RoundLoopRunner(), **({"to_nodes": ["curate_tasks"]} if mode == "first" else {}))
    while mlflow.active_run() is not None:
        mlflow.end_run()
    result = {"first_node_s": timing.first, "seconds": time.monotonic() - STARTED}
    if mode == "full":
        result.update(_overhead(timing.nodes, rounds))
        window = max(1, rounds // 10)  # the resident set's median over the first and the last tenth of the rounds
        result.update(first_mb=statistics.median(timing.resident[:window]),
                      last_mb=statistics.median(timing.resident[-window:]),
                      peak_growth=sorted(timing.peak_growth.items(), key=lambda kv: -kv[1])[:5])
    out.write_text(json.dumps(result))


def _peak_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def measure(rounds: int, mode: str, timeout: float) -> dict:
    """One child run in a scratch project; its timings and peak memory, or `timed_out`."""
    with tempfile.TemporaryDirectory(prefix="rounds-scale-") as scratch:
        project = Path(scratch)
        shutil.copytree(ROOT / "conf", project / "conf")
        shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
        (project / "src").mkdir()
        (project / "mlruns").mkdir()
        out = project / "result.json"
        env = {**os.environ, "DO_NOT_TRACK": "true", "KEDRO_DISABLE_TELEMETRY": "1",
               "MLFLOW_DISABLE_TELEMETRY": "true", "DVC_NO_ANALYTICS": "1"}
        with (project / "run.log").open("w") as log:  # a file: a long run's progress would fill a pipe and block it
            proc = subprocess.Popen([sys.executable, __file__, "--child", str(rounds), mode, str(project), str(out)],
                                    stdout=log, stderr=subprocess.STDOUT, env=env, text=True)
            started, peak = time.monotonic(), 0.0
            while proc.poll() is None and time.monotonic() - started < timeout:
                peak = max(peak, _peak_mb(proc.pid) or 0.0)
                time.sleep(0.5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                return {"timed_out": True, "peak_mb": peak}
        if proc.returncode != 0:
            raise RuntimeError(f"{rounds} rounds ({mode}) failed:\n{(project / 'run.log').read_text()[-3000:]}")
        return {**json.loads(out.read_text()), "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[20, 200, 2000, 5000])
    parser.add_argument("--full-up-to", type=int, default=200, help="whole minimal runs for sizes up to this")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a size may take to start, or to run")
    parser.add_argument("--child", nargs=4, metavar=("ROUNDS", "MODE", "PROJECT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rounds, mode, project, out = args.child
        child(int(rounds), mode, Path(project), Path(out))
        return
    rows, smallest = [], None
    for rounds in sorted(args.rounds):
        first = measure(rounds, "first", args.timeout)
        full = measure(rounds, "full", args.timeout) if rounds <= args.full_up_to and not first.get("timed_out") else {}
        if smallest is None and not first.get("timed_out"):
            smallest = first["first_node_s"]
        rows.append((rounds, first, full))
        print(f"  {rounds} rounds measured", file=sys.stderr, flush=True)
    print(f"{'rounds':>7} {'first node':>11} {'x smallest':>10} {'ms/round first':>15} {'ms/round last':>14} "
          f"{'whole run':>10} {'peak MB':>8} {'MB first':>9} {'MB last':>8}")
    for rounds, first, full in rows:
        if first.get("timed_out"):
            start, ratio = f"> {args.timeout:.0f} s", "-"
        else:
            start, ratio = f"{first['first_node_s']:.1f} s", f"{first['first_node_s'] / smallest:.1f}x"
        per_first = f"{full['first_ms']:.0f}" if full and not full.get("timed_out") else "-"
        per_last = f"{full['last_ms']:.0f}" if full and not full.get("timed_out") else "-"
        whole = (f"> {args.timeout:.0f} s" if full.get("timed_out") else f"{full['seconds']:.0f} s") if full else "-"
        peak = (full or first)["peak_mb"]
        resident = [f"{full[k]:.0f}" if full and not full.get("timed_out") else "-" for k in ("first_mb", "last_mb")]
        print(f"{rounds:>7} {start:>11} {ratio:>10} {per_first:>15} {per_last:>14} {whole:>10} {peak:>8.0f} "
              f"{resident[0]:>9} {resident[1]:>8}")
    largest = [(rounds, full) for rounds, _, full in rows if full and not full.get("timed_out")][-1:]
    for rounds, full in largest:
        grew = ", ".join(f"{name} +{mb:.0f} MB" for name, mb in full["peak_growth"] if mb >= 1)
        print(f"\nwhere the peak grew ({rounds} rounds): {grew or 'nowhere by 1 MB or more'}")


if __name__ == "__main__":
    main()
