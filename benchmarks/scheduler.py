"""Jobs per second for short jobs: our scheduler (local and Ray) vs a plain ProcessPoolExecutor.

    python benchmarks/scheduler.py [--jobs 10000] [--workers 2] [--no-ray]

In the same run, `--jobs` short jobs (a tiny arithmetic function) go through (a) a plain
`concurrent.futures.ProcessPoolExecutor`, one `submit` per job, results via `as_completed`;
(b) our `local` backend (`Scheduler.map`), with per-job timeouts, retries and metrics on;
(c) the executor's batched `map(chunksize=...)` (its fastest path, without per-job results,
timeouts or retries); (d) our `ray` backend on a local Ray. Worker start-up is excluded from
every timing (each pool is warmed up first). Prints a table and the ratios.
"""

from __future__ import annotations

import argparse
import logging
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

from rlvr_factory.scheduler import Scheduler
from rlvr_factory.scheduler.local import LocalBackend


def short_job(x: int) -> int:
    """A job of a few microseconds: the dispatch overhead is what is measured."""
    return (x * x) % 7919


def run_executor(jobs: int, workers: int, chunksize: int | None = None) -> float:
    """One `submit` per job with results via `as_completed`, or (`chunksize`) the batched `map`,
    the executor's fastest path (no per-job result, timeout or retry)."""
    with ProcessPoolExecutor(workers) as executor:
        list(executor.map(short_job, range(workers * 4)))  # warm up
        start = time.perf_counter()
        if chunksize is None:
            futures = [executor.submit(short_job, i) for i in range(jobs)]
            total = sum(f.result() for f in as_completed(futures))
        else:
            total = sum(executor.map(short_job, range(jobs), chunksize=chunksize))
        seconds = time.perf_counter() - start
    assert total == sum(short_job(i) for i in range(jobs))
    return jobs / seconds


def run_scheduler(backend, jobs: int, workers: int) -> float:
    with Scheduler(backend, workers=workers, timeout=30.0) as scheduler:
        list(scheduler.map(short_job, range(workers * 4)))  # warm up
        start = time.perf_counter()
        results = list(scheduler.map(short_job, range(jobs)))
        seconds = time.perf_counter() - start
    assert all(r.ok for r in results) and sum(r.value for r in results) == sum(short_job(i) for i in range(jobs))
    return jobs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray backend")
    args = parser.parse_args()

    chunk = max(1, args.jobs // (args.workers * 16))
    rows = [("ProcessPoolExecutor (submit + as_completed)", run_executor(args.jobs, args.workers)),
            ("rlvr scheduler, local backend", run_scheduler(LocalBackend(), args.jobs, args.workers)),
            (f"ProcessPoolExecutor.map(chunksize={chunk})", run_executor(args.jobs, args.workers, chunk))]
    if not args.no_ray:
        import ray

        from rlvr_factory.scheduler.ray_backend import RayBackend

        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        rows.append(("rlvr scheduler, ray backend (local Ray)", run_scheduler(RayBackend(), args.jobs, args.workers)))
        ray.shutdown()
    print(f"\n{args.jobs} short jobs on {args.workers} workers\n")
    print(f"{'runner':<46} {'jobs/s':>10}")
    for name, rate in rows:
        print(f"{name:<46} {rate:>10.0f}")
    print(f"\nratio local / ProcessPoolExecutor: {rows[1][1] / rows[0][1]:.2f}")
    print(f"ratio local / ProcessPoolExecutor.map(chunksize): {rows[1][1] / rows[2][1]:.2f}")
    if len(rows) > 3:
        print(f"ratio ray / ProcessPoolExecutor:   {rows[3][1] / rows[0][1]:.2f}")


if __name__ == "__main__":
    main()
