"""Rounds per hour, synchronous vs asynchronous rounds (`rl.max_staleness: 1`), on the real `rl` pipeline.

    kedro run --pipelines=rlvr           # once: the curated tasks and the SFT policy the rounds start from
    python benchmarks/async_rounds.py [--rounds 5] [--repeats 2] [--params rl.prompts_per_round=64,...]
    # another configuration: its run first, then the same --env (tasks and SFT policy from --project)
    kedro run --pipeline=rlvr --env code_repair && python benchmarks/async_rounds.py --env code_repair

Each variant is a fresh process running `kedro run --pipelines=rl` (the round loop, `RoundLoopRunner`) in a
scratch copy of this project's configuration and its curated tasks and SFT policy, alternating
`--repeats` times so a busy machine slows all alike. The time of a run is from the end of
`round_000`'s rollout to the end of its last round node (the last update, or a round's stats that
waited for a validation ahead; node timings from a Kedro hook), so
start-up, the background worker's start and its first rollout (no round runs ahead of round 0) are
left out of every variant alike. Variants:

* `sync`: today's rounds, the transformers engine in the trainer's process (both cores);
* `sync, background`: the same rounds with the engine in its worker process (one core each);
* `async`: `rl.max_staleness: 1` with the engine in its worker process: round k+1's rollout samples
  from a frozen copy of round k's starting policy while round k's update trains; the rollout ahead
  samples on one core and the update beside it trains on the other (`rollout/background.py`);
  the worker validates the last `rl.validation_ahead_share` of each round's validation tasks behind
  the next rollout ahead, the update the others right after it trains;
* `async, all validation ahead`: the same with the worker validating every task
  (`rl.validation_ahead_share: 1`).

With `--ceiling`, a `sync, one thread` variant runs the synchronous rounds on one torch thread, and
the table adds what perfect overlap would give on these two cores: per round, the longer of that
variant's worker side and trainer side (each on one core, side by side, nothing waiting), for the
rollout alone ahead, for the rollout and the previous round's validation ahead (`deferred_validations`
in `pipelines/rl/pipeline.py`), and for the rollout and `rl.validation_ahead_share` of the validation
ahead, the rest in the update (what `async` runs).

The table gives seconds per round, rounds per hour, the ratio to `sync`, and the last round's
validation greedy accuracy (learning must stay comparable: the full-run comparison is in docs/rl.md).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from rlvr_factory.parameters import RLConfig  # noqa: E402  (the default rl.validation_ahead_share)

VARIANTS = {
    "sync": {},
    "sync, background": {"rollout.background": "true"},
    "async (max_staleness 1)": {"rl.max_staleness": "1", "rollout.background": "true"},
    "async, all validation ahead": {"rl.max_staleness": "1", "rollout.background": "true",
                                    "rl.validation_ahead_share": "1"},
}
ONE_THREAD = "sync, one thread"
ENV = {ONE_THREAD: {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}
CHILD = r'''
import json, sys, time
from pathlib import Path
from kedro.framework.hooks import hook_impl
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from rlvr_factory.config_loader import data_root
from rlvr_factory.pipelines.rl.loop import RoundLoopRunner

class Timer:
    def __init__(self): self.start, self.end, self.validation = {}, {}, []
    @hook_impl
    def before_node_run(self, node): self.start[node.name] = time.perf_counter()
    @hook_impl
    def after_node_run(self, node, outputs):
        self.end[node.name] = time.perf_counter()
        self.validation += [v["eval_seconds"]["value"] for k, v in outputs.items()
                            if k.endswith(".mlflow_metrics") and "eval_seconds" in v]

def main():
    project, params, env = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
    bootstrap_project(project)
    timer = Timer()
    with KedroSession.create(project_path=project, env=env, runtime_params=params) as session:
        session._hook_manager.register(timer)
        session.run(pipeline_names=["rl"], runner=RoundLoopRunner())
    rounds = int(params["rl"]["rounds"])
    # to the last round node's end: the last update, or a round's stats finished after it (validation ahead)
    first, last = timer.end["round_000.rollout"], max(e for n, e in timer.end.items() if n.startswith("round_"))
    history = json.loads((project / data_root(env) / "08_reporting/round_history.json").read_text())
    phases = {}
    for name, end in timer.end.items():
        if name.startswith("round_") and name != "round_000.rollout":  # in the window, as `seconds`
            phase = name.split(".", 1)[1]
            phases[phase] = phases.get(phase, 0.0) + (end - timer.start[name]) / rounds
    phases["validation"] = sum(timer.validation) / rounds  # inside the update, or in the worker when it runs ahead
    print("RESULT " + json.dumps({"seconds": last - first, "val": history[-1]["val_greedy_accuracy"], "phases": phases,
                                  "staleness": [h.get("staleness", 0) for h in history]}))

if __name__ == "__main__":
    main()
'''


def nested(flat: dict[str, str]) -> dict:
    """`a.b=1` items as a nested parameter dict, values parsed as YAML scalars."""
    import yaml

    out: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(value)
    return out


def scratch_project(source: Path, where: Path, env: str) -> Path:
    """This checkout's conf/ and pyproject.toml with the curated tasks and the SFT policy `source` made under `env`
    (in its data folder: data/, or data/envs/ENV), in a fresh project."""
    from rlvr_factory.config_loader import data_root

    data = data_root(env)
    needed = [source / data / "05_model_input", source / data / "06_models/sft_policy"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        sys.exit(f"async_rounds: {', '.join(missing)} missing; run `kedro run --pipelines=rlvr"
                 f"{'' if data == 'data' else ' --env ' + env}` in {source} first")
    shutil.copytree(ROOT / "conf", where / "conf")
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    (where / "src").mkdir()
    (where / "mlruns").mkdir()
    for path in needed:
        shutil.copytree(path, where / path.relative_to(source))
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, default=ROOT, help="where the tasks and SFT policy come from: a project "
                        "that has run `kedro run --pipelines=rlvr` (default: this one)")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="which, separated by ';': " + "; ".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ceiling", action="store_true", help="also run the synchronous rounds on one torch thread "
                        "and print the perfect-overlap ceiling from its phases")
    parser.add_argument("--env", default="base", help="the configuration environment every variant runs "
                        "(e.g. code_repair; --project must have run `kedro run --pipeline=rlvr --env` with it)")
    parser.add_argument("--params", default="", help="extra a.b=v,... for every variant (e.g. rl.prompts_per_round=32)")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.params.split(",") if item)
    env = {**os.environ, "DO_NOT_TRACK": "true", "KEDRO_DISABLE_TELEMETRY": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    chosen = [v.strip() for v in args.variants.split(";")]
    variants = {**VARIANTS, **({ONE_THREAD: {}} if args.ceiling else {})}
    results: dict[str, list[dict]] = {name: [] for name in variants if name in chosen or name == ONE_THREAD}
    with tempfile.TemporaryDirectory(prefix="async_rounds_") as tmp:
        for repeat in range(args.repeats):
            for name in results:
                overrides = variants[name]
                project = scratch_project(args.project, Path(tmp) / f"{repeat}_{len(results[name])}_{name[:5]}",
                                          args.env)
                params = nested({"rl.rounds": str(args.rounds), "rl.checkpoint_every": "0", **extra, **overrides})
                env["MLFLOW_TRACKING_URI"] = f"sqlite:///{project}/mlruns/mlflow.db"
                done = subprocess.run([sys.executable, "-c", CHILD, str(project), json.dumps(params), args.env], cwd=project,
                                      env={**env, **ENV.get(name, {})}, capture_output=True, text=True)
                line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
                if done.returncode or line is None:
                    sys.exit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
                results[name].append(json.loads(line[len("RESULT "):]))
                phases = ", ".join(f"{k} {v:.2f}" for k, v in results[name][-1]["phases"].items() if v >= 0.05)
                print(f"  repeat {repeat + 1}/{args.repeats} {name}: {results[name][-1]['seconds']:.1f} s "
                      f"(s per round in nodes: {phases})", flush=True)
                shutil.rmtree(project)
    first = next(iter(results))
    base = statistics.median(r["seconds"] for r in results[first])
    print(f"\n{args.rounds} rounds of the `rl` pipeline (conf/{args.env}{', ' + args.params if args.params else ''}), median of {args.repeats}, "
          f"{os.cpu_count()} cores\n")
    print(f"| variant | s / round | rounds / hour | vs {first} | val greedy (last round) | staleness per round |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        print(f"| {name} | {seconds / args.rounds:.1f} | {3600 * args.rounds / seconds:.0f} | {base / seconds:.2f}x | "
              f"{statistics.median(r['val'] for r in runs):.3f} | {runs[0]['staleness']} |")
    if ONE_THREAD in results:
        runs = results[ONE_THREAD]
        rollout = statistics.median(r["phases"].get("rollout", 0.0) for r in runs)
        validation = statistics.median(r["phases"].get("validation", 0.0) for r in runs)
        rest = statistics.median(sum(v for k, v in r["phases"].items() if k not in ("rollout", "validation"))
                                 for r in runs)  # the update's node time includes its validation
        share = float(extra.get("rl.validation_ahead_share", RLConfig().validation_ahead_share))
        for label, worker, trainer in (
            ("rollout ahead", rollout, rest),
            ("rollout and validation ahead", rollout + validation, rest - validation),
            (f"rollout and {share:.0%} of the validation ahead", rollout + share * validation, rest - share * validation),
        ):
            ceiling = max(worker, trainer)
            print(f"| perfect overlap, {label} (ceiling: max of one thread's worker side {worker:.1f} s and "
                  f"trainer side {trainer:.1f} s) | {ceiling:.1f} | {3600 / ceiling:.0f} | "
                  f"{base / args.rounds / ceiling:.2f}x | | |")


if __name__ == "__main__":
    main()
