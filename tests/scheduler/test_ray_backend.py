"""The same scheduler on Ray actors (a local Ray started once for the session)."""

from __future__ import annotations

import pytest

from rlvr_factory.scheduler import RetryPolicy, Scheduler, create_scheduler
from rlvr_factory.verifiers.pool import VerifierPool
from tests.scheduler import jobs
from tests.scheduler.conftest import make_backend
from tests.verifiers.test_pool import Scripted


@pytest.fixture(scope="module")
def on_ray(ray_cluster):
    retry = RetryPolicy(max_attempts=2, backoff_seconds=0.01, retry_timeouts=True)  # the table below retries a timeout once
    with Scheduler(make_backend("ray"), workers=2, timeout=1.0, retry=retry) as scheduler:
        yield scheduler


def test_each_status_comes_back_once_on_ray(on_ray, tmp_path):
    calls = [(jobs.echo, 7), (jobs.fail, "bad input"), (jobs.hang, None), (jobs.kill_self, None),
             (jobs.infra_until, (str(tmp_path / "infra"), 1)), (jobs.grade, ("41", "42", str(tmp_path / "grade")))]
    ids = [on_ray.submit(fn, payload) for fn, payload in calls]
    results = on_ray.results(ids)
    assert [(r.status, r.attempts) for r in results] == [
        ("ok", 1), ("error", 1), ("timeout", 2), ("infra_error", 2), ("ok", 2), ("ok", 1),
    ]
    assert results[0].value == 7 and results[4].value == "ok" and results[5].value is False
    assert results[1].error == "ValueError: bad input"
    assert "its worker died: the worker process exited with code -9 (attempt 2 of 2)" == results[3].error
    assert (tmp_path / "grade").read_text().count("run") == 1  # a wrong answer is not retried


def test_many_jobs_on_ray_come_back_in_order_across_actors(on_ray):
    results = list(on_ray.map(jobs.pid_after, [0.02] * 40))
    assert all(r.ok for r in results)
    assert len({r.value for r in results}) == 2  # both actors' job processes took work


def test_a_verifier_pool_scores_through_ray(ray_cluster):
    with VerifierPool(Scripted(), workers=2, timeout=1.0, scheduler={"backend": "ray"}) as pool:
        scores = pool.score_many([("ok:7", "7"), ("ok:8", "7"), ("raise", "7"), ("hang", "7"), ("quick:7", "7")])
        stats = pool.stats
    assert [(s.status, s.correct) for s in scores] == [
        ("ok", True), ("ok", False), ("error", False), ("timeout", False), ("ok", True),
    ]
    assert stats["dispatched"] == 4 and stats["quick"] == 1 and stats["timeouts"] == 1


def test_ray_settings_come_from_parameters(ray_cluster):
    scheduler = create_scheduler({"backend": "ray", "workers": 1, "ray": {"address": "local", "num_cpus": 2}})
    assert scheduler.backend.name == "ray" and scheduler.backend.num_cpus == 2
    assert scheduler.wait(scheduler.submit(jobs.echo, "hi")).value == "hi"
    scheduler.close()
