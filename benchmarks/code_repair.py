"""Code-repair environment throughput: steps/s through the scheduler, and what a workspace restore costs.

    python benchmarks/code_repair.py [--programs 20] [--episodes 32] [--restores 40]

Episodes are scripted (no model): each resets a repair task, makes a wrong edit (the visible tests
run and report), then applies the reference patch (the visible tests pass; the held-out tests judge),
so every step does the environment's real work in a real bubblewrap sandbox. For 1, 2 and 4 workers:

- steps/s: the episodes' reset and step calls through `rollout.environment.executor: scheduler` (each
  worker process keeps its own warm sandbox), and inline (in this process, one sandbox) as the peer;
- restore: the median time to restore a task's workspace snapshot into a warm sandbox, with that many
  sandboxes restoring at once, against the peer a fresh sandbox per episode would pay: starting one.
Machines under load give lower absolute numbers; the ratios measured in one run are what compare.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from rlvr_factory.domains.code_repair import MODULE, CodeRepairDomain
from rlvr_factory.domains.code_repair_edits import Block
from rlvr_factory.domains.code_repair_workspace import snapshot
from rlvr_factory.rollout.steps import Executor, ExecutorConfig
from rlvr_factory.sandbox import Sandbox

WORKERS = (1, 2, 4)


def wrong_edit(task) -> str:
    """An edit that applies but repairs nothing: a comment after the module's last line."""
    last = task.reference["files"][MODULE].splitlines(keepends=True)[-1]
    return Block(MODULE, last, last + "# checked\n").render()


def steps_per_second(domain: CodeRepairDomain, tasks: list, config: ExecutorConfig) -> tuple[float, float]:
    """(steps/s, share of episodes repaired) for one reset and two steps per task."""
    with Executor(config) as executor:
        envs = [domain.environment() for _ in tasks]
        executor.run("reset", envs[:1], tasks[:1])  # start the workers and their sandboxes outside the clock
        start = time.perf_counter()
        envs = [env for env, _ in executor.run("reset", envs, tasks)]
        envs = [env for env, _ in executor.run("step", envs, [wrong_edit(t) for t in tasks])]
        results = [r for _, r in executor.run("step", envs, [t.reference["reference_patch"] for t in tasks])]
        seconds = time.perf_counter() - start
    repaired = sum(bool(getattr(getattr(r, "score", None), "correct", False)) for r in results) / len(tasks)
    return 3 * len(tasks) / seconds, repaired


def restore_seconds(tasks: list, workers: int, restores: int) -> float:
    """Median seconds of one snapshot restore, `workers` warm sandboxes restoring at once."""
    boxes = [Sandbox(workspace_mb=16) for _ in range(workers)]
    for box in boxes:
        box.start()
    snapshots = [snapshot(t.reference["files"]) for t in tasks]

    def loop(box: Sandbox) -> list[float]:
        times = []
        for i in range(restores):
            start = time.perf_counter()
            box.restore(snapshots[i % len(snapshots)], as_base=True)
            times.append(time.perf_counter() - start)
        return times

    try:
        with ThreadPoolExecutor(workers) as pool:
            return statistics.median(t for times in pool.map(loop, boxes) for t in times)
    finally:
        for box in boxes:
            box.close()


def start_seconds(repeats: int) -> float:
    """Median seconds to start a fresh sandbox (and stop it): the cost of one sandbox per episode."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        box = Sandbox(workspace_mb=16)
        box.start()
        times.append(time.perf_counter() - start)
        box.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=20, help="built-in programs to plant bugs in")
    parser.add_argument("--episodes", type=int, default=32, help="scripted episodes per measurement")
    parser.add_argument("--restores", type=int, default=40, help="restores per sandbox")
    args = parser.parse_args()
    domain = CodeRepairDomain(max_programs=args.programs, mutants_per_program=2)
    tasks = (domain.generate_tasks() * args.episodes)[: args.episodes]
    cold = start_seconds(5)
    inline_rate, _ = steps_per_second(domain, tasks, ExecutorConfig(executor="inline"))
    print(f"{len(tasks)} scripted episodes (reset, a wrong edit, the reference patch) on built-in mutants")
    print(f"fresh sandbox start (the peer of a restore): {cold * 1000:.1f} ms")
    print(f"inline, 1 sandbox in this process: {inline_rate:.1f} steps/s")
    print("| workers | steps/s (scheduler) | vs inline | repaired | restore ms | restore vs fresh start |")
    print("|---|---|---|---|---|---|")
    for workers in WORKERS:
        rate, repaired = steps_per_second(domain, tasks, ExecutorConfig(executor="scheduler", workers=workers,
                                                                         timeout_seconds=60.0))
        restore = restore_seconds(tasks, workers, args.restores)
        print(f"| {workers} | {rate:.1f} | {rate / inline_rate:.2f}x | {repaired:.2f} | {restore * 1000:.2f} "
              f"| {cold / restore:.0f}x cheaper |")


if __name__ == "__main__":
    main()
