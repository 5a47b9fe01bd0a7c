"""verify_batch: a domain's completions scored through the process's shared pool on the scheduler,
with the batch's pool counters and scheduler metrics."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlvr_factory import verification
from rlvr_factory.verification import VerifyConfig, verify_batch
from tests.verifiers.test_pool import Scripted

VERIFY = VerifyConfig(workers=2, timeout_seconds=1.0, max_input_chars=1000,
                      scheduler={"backend": "local", "retry": {"max_attempts": 2, "retry_timeouts": False}})


class ScriptedDomain:
    """The part of a domain verify_batch uses: its verifier and the gold of a reference."""

    name = "scripted"
    verifier = Scripted()

    def gold(self, reference: dict) -> str:
        return reference["answer"]


@pytest.fixture(autouse=True)
def fresh_pools():
    verification.close_pools()
    yield
    verification.close_pools()


def test_scores_come_back_in_order_with_the_batchs_pool_counters_and_scheduler_metrics():
    completions = ["ok:1", "ok:2", "quick:1", "hang", "raise"]
    scores, stats = verify_batch(ScriptedDomain(), completions, [{"answer": "1"}] * 5, VERIFY)
    assert [(s.status, s.correct) for s in scores] == [
        ("ok", True), ("ok", False), ("ok", True), ("timeout", False), ("error", False),
    ]
    assert (stats["quick"], stats["dispatched"], stats["timeouts"], stats["errors"]) == (1, 4, 1, 1)
    assert stats["scheduler_submitted"] == 4 and stats["scheduler_completed"] == 4
    assert stats["scheduler_timeouts"] == 1 and stats["scheduler_retries"] == 0
    assert stats["scheduler_completed_per_second"] > 0
    assert stats["scheduler_peak_queue_depth"] + stats["scheduler_peak_in_flight"] >= 4
    assert 0.0 < stats["scheduler_utilisation"] <= 1.0
    assert {"scheduler_worker_0_utilisation", "scheduler_worker_1_utilisation"} <= set(stats)


def test_batches_with_the_same_settings_share_one_pool_and_its_cache():
    verify_batch(ScriptedDomain(), ["ok:1"], [{"answer": "1"}], VERIFY)
    _, stats = verify_batch(ScriptedDomain(), ["ok:1"], [{"answer": "1"}], VERIFY)
    assert (stats["cached"], stats["dispatched"], stats["scheduler_submitted"]) == (1, 0, 0)
    other = replace(VERIFY, scheduler={"backend": "local", "retry": {"max_attempts": 3}})
    verify_batch(ScriptedDomain(), ["ok:1"], [{"answer": "1"}], other)
    assert len(verification._pools) == 2


def test_an_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"scheduler.backend: must be one of 'local', 'ray', got 'spark'"):
        verify_batch(ScriptedDomain(), ["ok:1"], [{"answer": "1"}], replace(VERIFY, scheduler={"backend": "spark"}))
