"""The scheduler on local worker processes: statuses, order, backpressure, cancellation,
timeouts that kill the worker's process group, retries of infrastructure failures only,
resource-aware load balancing and metrics."""

from __future__ import annotations

import os
import time

import pytest

from rlvr_factory.scheduler import RetryPolicy, Scheduler, create_scheduler
from rlvr_factory.scheduler.local import LocalBackend
from tests.scheduler import jobs


def alive(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def runs(path) -> int:
    """How many times a `jobs.counted`-style job ran."""
    return len(path.read_text().splitlines()) if path.exists() else 0


# Results


def test_each_status_comes_back_once_with_its_value_or_message(local):
    ids = [local.submit(jobs.echo, 7), local.submit(jobs.fail, "bad input"), local.submit(jobs.hang, None),
           local.submit(jobs.unpicklable_result, None)]
    results = local.results(ids)
    assert [r.job_id for r in results] == ids
    assert [r.status for r in results] == ["ok", "error", "timeout", "error"]
    assert results[0].value == 7 and results[0].ok
    assert results[1].error == "ValueError: bad input"
    assert "1 s timeout" in results[2].error
    assert "cannot be sent back" in results[3].error


def test_results_come_in_submission_order_or_as_they_complete(local):
    ids = [local.submit(jobs.sleep_then, (0.5, "slow")), local.submit(jobs.sleep_then, (0.0, "fast"))]
    assert [r.value for r in local.as_completed(ids)] == ["fast", "slow"]
    assert [r.value for r in local.map(jobs.sleep_then, [(0.3, "a"), (0.0, "b")])] == ["a", "b"]
    assert [r.value for r in local.map(jobs.sleep_then, [(0.3, "a"), (0.0, "b")], ordered=False)] == ["b", "a"]


def test_a_result_is_handed_out_only_once(local):
    job = local.submit(jobs.echo, 1)
    assert local.wait(job).value == 1
    with pytest.raises(KeyError, match="no pending or unclaimed result"):
        local.wait(job)


def test_many_short_jobs_all_come_back_in_order(local):
    assert [r.value for r in local.map(jobs.echo, range(3000))] == list(range(3000))


# Backpressure and cancellation


def test_submit_waits_while_max_in_flight_jobs_are_pending():
    with Scheduler(LocalBackend(), workers=2, max_in_flight=4) as scheduler:
        for i in range(40):
            scheduler.submit(jobs.sleep_then, (0.01, i))
            snapshot = scheduler.metrics()
            assert snapshot.queue_depth + snapshot.in_flight <= 4
        assert sorted(r.value for r in scheduler.as_completed()) == list(range(40))


def test_map_never_runs_ahead_of_what_was_handed_out_by_more_than_max_in_flight():
    handed_out = 0
    with Scheduler(LocalBackend(), workers=2, max_in_flight=3) as scheduler:
        for result in scheduler.map(jobs.echo, range(30)):
            assert scheduler.metrics().counters["submitted"] - handed_out <= 3
            handed_out += 1
            assert result.value == handed_out - 1


def test_cancelling_queued_and_running_jobs_reports_them_cancelled_and_frees_the_worker(local):
    running = local.submit(jobs.hang, None)
    queued = [local.submit(jobs.hang, None) for _ in range(3)]
    follow_up = local.submit(jobs.echo, "after")
    local._step()  # let the running job start
    start = time.monotonic()
    assert all(local.cancel(i) for i in [running, *queued])
    assert local.wait(follow_up).value == "after"
    assert time.monotonic() - start < 1.0  # no worker waited out a hang
    assert {r.status for r in local.results([running, *queued])} == {"cancelled"}
    assert local.cancel(follow_up) is False  # already finished


# Timeouts


def test_a_timeout_kills_the_worker_with_every_process_the_job_started(local, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    before = local.metrics().counters
    [result] = local.results([local.submit(jobs.grandchild_then_hang, str(pid_file), timeout=0.5)])
    assert result.status == "timeout"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)
    after = local.metrics().counters
    assert after["restarts"] - before["restarts"] == 3  # killed on each of its 3 attempts, then reported
    assert result.attempts == 3


def test_a_hung_job_does_not_hold_up_the_others():
    retry = RetryPolicy(retry_timeouts=False)
    with Scheduler(LocalBackend(), workers=2, timeout=1.0, retry=retry) as scheduler:
        start = time.monotonic()
        ids = [scheduler.submit(jobs.hang, None)] + [scheduler.submit(jobs.sleep_then, (0.01, i)) for i in range(30)]
        results = list(scheduler.as_completed(ids))
        elapsed = time.monotonic() - start
    assert [r.status for r in results[:-1]] == ["ok"] * 30  # every short job finished before the hang's deadline
    assert (results[-1].job_id, results[-1].status, results[-1].attempts) == (ids[0], "timeout", 1)
    assert elapsed < 2.0


# Retries: infrastructure failures only


def test_an_infra_error_is_retried_with_backoff_until_it_passes(local, tmp_path):
    path = tmp_path / "runs"
    start = time.monotonic()
    [result] = local.results([local.submit(jobs.infra_until, (str(path), 2))])
    assert (result.status, result.value, result.attempts) == ("ok", "ok", 3)
    assert runs(path) == 3
    assert time.monotonic() - start >= 0.01 + 0.02  # the two backoffs


def test_an_infra_error_on_every_attempt_is_reported_as_infra_error_after_max_attempts(local, tmp_path):
    path = tmp_path / "runs"
    [result] = local.results([local.submit(jobs.infra_until, (str(path), 99))])
    assert (result.status, result.attempts) == ("infra_error", 3)
    assert result.error == "InfraError: sandbox failed to start (run 3) (attempt 3 of 3)"
    assert runs(path) == 3


def test_a_job_whose_worker_dies_is_retried_on_a_new_worker_then_reported(local):
    before = local.metrics().counters
    [result] = local.results([local.submit(jobs.kill_self, None)])
    assert (result.status, result.attempts) == ("infra_error", 3)
    assert "its worker died: the worker process exited with code -9" in result.error
    after = local.metrics().counters
    assert after["restarts"] - before["restarts"] == 3
    assert after["retries"] - before["retries"] == 2


@pytest.mark.parametrize("job", [jobs.grade, jobs.failing_test])
def test_a_genuine_failure_is_never_retried(local, tmp_path, job):
    path = tmp_path / "runs"
    payload = ("41", "42", str(path)) if job is jobs.grade else str(path)
    before = local.metrics().counters["retries"]
    [result] = local.results([local.submit(job, payload)])
    if job is jobs.grade:
        assert (result.status, result.value) == ("ok", False)  # a wrong answer is a result
    else:
        assert (result.status, result.error) == ("error", "AssertionError: expected 3")
    assert result.attempts == 1
    assert runs(path) == 1
    assert local.metrics().counters["retries"] == before


# Load balancing and resources


def test_idle_workers_share_the_work():
    with Scheduler(LocalBackend(), workers=3) as scheduler:
        pids = {r.value for r in scheduler.map(jobs.pid_after, [0.05] * 12)}
    assert len(pids) == 3


def test_jobs_needing_more_cpus_run_only_as_many_at_once_as_the_cpus_allow(tmp_path):
    with Scheduler(LocalBackend(), workers=4, num_cpus=4) as scheduler:
        ids = [scheduler.submit(jobs.timed, 0.2, cpus=2) for _ in range(4)]
        spans = [r.value for r in scheduler.results(ids)]
        with pytest.raises(ValueError, match="CPUs"):
            scheduler.submit(jobs.echo, 1, cpus=5)
    most_at_once = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert most_at_once == 2


# Metrics, lifecycle, settings


def test_metrics_over_a_window_count_jobs_rates_and_utilisation(local):
    before = local.metrics(reset_peaks=True)
    list(local.map(jobs.sleep_then, [(0.1, i) for i in range(8)]))
    local.wait(local.submit(jobs.fail, "x"))
    window = local.metrics().since(before)
    assert window["ok"] == 8 and window["error"] == 1 and window["completed"] == 9
    assert window["completed_per_second"] > 0
    assert window["peak_in_flight"] >= 2
    assert 0.3 < window["utilisation"] <= 1.0
    assert set(window) >= {"worker_0_utilisation", "worker_1_utilisation", "retries", "timeouts", "infra_failures",
                           "peak_queue_depth"}


def test_a_hash_seed_gives_workers_the_string_hashing_of_that_pythonhashseed_and_leaves_the_environment_alone():
    import subprocess
    import sys

    expected = int(subprocess.run([sys.executable, "-c", "print(hash('isomorphic'))"], env={**os.environ, "PYTHONHASHSEED": "7"},
                                  capture_output=True, text=True, check=True).stdout)
    before = os.environ.get("PYTHONHASHSEED")
    for _ in range(2):  # two schedulers, two sets of fresh workers: the same hashes
        with create_scheduler({"workers": 2, "hash_seed": 7, "timeout_seconds": 30.0}) as scheduler:
            assert {r.value for r in scheduler.map(jobs.string_hash, ["isomorphic"] * 4)} == {expected}
    assert os.environ.get("PYTHONHASHSEED") == before
    if before != "7":
        with Scheduler(LocalBackend(), workers=1) as scheduler:  # without one: the fork server's own salt
            assert next(scheduler.map(jobs.string_hash, ["isomorphic"])).value != expected
    for bad in (-1, 2**32, "7", True, 1.5):
        with pytest.raises(ValueError, match="hash_seed"):
            LocalBackend(hash_seed=bad)
    with pytest.raises(ValueError, match="hash_seed is a setting of the local backend"):
        create_scheduler({"backend": "ray", "hash_seed": 0})


def test_a_closed_scheduler_refuses_work_and_leaves_no_worker():
    scheduler = Scheduler(LocalBackend(), workers=2)
    pids = {r.value for r in scheduler.map(jobs.pid_after, [0.05] * 4)}
    scheduler.close()
    assert not any(alive(p) for p in pids)
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.submit(jobs.echo, 1)


def test_a_job_function_that_cannot_reach_a_worker_is_refused(local):
    with pytest.raises(TypeError, match="picklable"):
        local.submit(lambda x: x, 1)


@pytest.mark.parametrize("settings, message", [
    ({"backend": "spark"}, "scheduler.backend: must be one of 'local', 'ray'"),
    ({"workers": 0}, "workers"),
    ({"timeout_seconds": 0}, "timeout"),
    ({"retry": {"max_attempts": 0}}, "max_attempts"),
    ({"retries": 3}, r"scheduler.retries: unknown key \(did you mean retry\?\)"),
])
def test_bad_settings_are_refused_with_what_was_wrong(settings, message):
    with pytest.raises(ValueError, match=message):
        create_scheduler(settings)


def test_settings_choose_workers_timeout_and_retry_policy():
    scheduler = create_scheduler({"backend": "local", "workers": 3, "timeout_seconds": 2.5,
                                  "retry": {"max_attempts": 5, "backoff_seconds": 0.1}})
    assert (scheduler.workers, scheduler.timeout, scheduler.retry.max_attempts) == (3, 2.5, 5)
    assert scheduler.retry.backoff(3) == pytest.approx(0.4)
    scheduler.close()


def test_the_worker_processes_are_not_the_callers(local):
    assert local.wait(local.submit(jobs.pid, None)).value != os.getpid()


def test_abandoning_a_batch_cancels_what_runs_and_drops_what_finished(local):
    done = local.submit(jobs.echo, 1)
    local.wait(local.submit(jobs.echo, 2))  # by now `done` has finished or is about to
    running = local.submit(jobs.hang, None)
    local.abandon([done, running])
    assert local.metrics().counters["cancelled"] >= 1
    with pytest.raises(KeyError):
        local.wait(done)
    with pytest.raises(KeyError):
        local.wait(running)


def test_isolated_jobs_each_run_in_a_fork_that_takes_what_they_leave_behind_with_it():
    with Scheduler(LocalBackend(memory_limit_mb=1024), workers=1, timeout=5.0) as plain:  # without: it stays
        assert [r.value for r in plain.results([plain.submit(jobs.remember, i) for i in range(3)])] == [
            [0], [0, 1], [0, 1, 2]]
    with Scheduler(LocalBackend(memory_limit_mb=1024, isolate_jobs=True), workers=1, timeout=1.0,
                   retry=RetryPolicy(max_attempts=2, backoff_seconds=0.01)) as isolated:
        assert [r.value for r in isolated.results([isolated.submit(jobs.remember, i) for i in range(3)])] == [
            [0], [1], [2]]
        pids = [r.value for r in isolated.results([isolated.submit(jobs.pid, None) for _ in range(3)])]
        assert len(set(pids)) == 3 and os.getpid() not in pids
        died = isolated.wait(isolated.submit(jobs.exit_now, 3))
        assert (died.status, died.attempts) == ("infra_error", 2) and "exited with code 3 before it answered" in died.error
        hung = isolated.wait(isolated.submit(jobs.pid_after, 30))
        assert hung.status == "timeout"
        assert isolated.wait(isolated.submit(jobs.echo, "still here")).value == "still here"
        assert isolated.metrics().counters["restarts"] == 1  # the timeout's; a dead fork leaves its worker running


def test_ray_refuses_to_isolate_jobs_it_would_run_in_place():
    with pytest.raises(ValueError, match="isolate_jobs forks a local worker"):
        create_scheduler({"backend": "ray", "isolate_jobs": True})
