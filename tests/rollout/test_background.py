"""The transformers engine in a worker process (`rollout.background`): the same samples as in the trainer's
process, from its own copy of the weights, synced by version; a dead worker is a clear error."""

from __future__ import annotations

import threading

import pytest
import torch

from rlvr_factory.rollout.background import (
    BackgroundEngine, BackgroundEngineError, available_cores, forget_rollouts_ahead, is_running_ahead, rollout_collected,
    rollout_started_ahead, running_ahead, sharing_cores,
)
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine
from tests.conftest import make_tiny_policy

REQUESTS = [Request([1, 40, 41, 42], key=("a", 0)), Request([1, 50, 51], key=("b", 0)), Request([1, 60], key=("c", 0))]
GREEDY = SamplingConfig(max_new_tokens=6, temperature=0.0)
SAMPLED = SamplingConfig(max_new_tokens=6, temperature=1.0, seed=3)


@pytest.fixture
def engine_and_policy():
    policy = make_tiny_policy(seed=0)
    threads = torch.get_num_threads()
    engine = BackgroundEngine(policy, threads=1)
    yield engine, policy
    engine.close()
    torch.set_num_threads(threads)


def _tokens(generations):
    return [g.token_ids for g in generations]


def test_the_worker_samples_what_the_engine_in_this_process_samples(engine_and_policy):
    engine, policy = engine_and_policy
    here = TransformersEngine(policy)
    for config in (GREEDY, SAMPLED):
        theirs, stats = engine.bound(policy).generate(REQUESTS, config)
        ours, _ = here.generate(REQUESTS, config)
        assert _tokens(theirs) == _tokens(ours)
        for a, b in zip(theirs, ours):
            assert a.finish_reason == b.finish_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert stats.new_tokens == sum(len(g.token_ids) for g in theirs)


def test_the_worker_keeps_its_copy_while_the_trainer_changes_weights_in_place_until_synced(engine_and_policy):
    engine, policy = engine_and_policy
    before, _ = engine.generate(REQUESTS, GREEDY)
    with torch.no_grad():  # an update trains in place, without a new version yet
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    assert _tokens(engine.generate(REQUESTS, GREEDY)[0]) == _tokens(before)  # still the weights it was given
    policy.version += 1
    assert engine.sync(policy) > 0 and engine.sync(policy) == 0.0  # pushed once per version
    after, _ = engine.generate(REQUESTS, GREEDY)
    assert _tokens(after) == _tokens(TransformersEngine(policy).generate(REQUESTS, GREEDY)[0])
    assert _tokens(after) != _tokens(before)


def test_two_threads_sampling_from_two_policies_each_get_their_own_policys_samples(engine_and_policy):
    engine, policy = engine_and_policy
    other = make_tiny_policy(seed=1)
    expected = {id(p): _tokens(TransformersEngine(p).generate(REQUESTS, SAMPLED)[0]) for p in (policy, other)}
    assert expected[id(policy)] != expected[id(other)]
    got: dict[int, list] = {}

    def sample(p):
        for _ in range(3):  # alternating on one worker, each call syncs its own weights first
            got.setdefault(id(p), []).append(_tokens(engine.bound(p).generate(REQUESTS, SAMPLED)[0]))

    threads = [threading.Thread(target=sample, args=(p,)) for p in (policy, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(runs == [expected[key]] * 3 for key, runs in got.items())


def test_a_dead_worker_is_an_error_naming_it_not_a_hang(engine_and_policy):
    engine, _ = engine_and_policy
    engine._process.kill()
    engine._process.join(5)
    with pytest.raises(BackgroundEngineError, match="not running"):
        engine.generate(REQUESTS, GREEDY)


def test_cores_follow_the_work_by_the_dags_rule_not_by_timing(engine_and_policy):
    engine, policy = engine_and_policy
    cores = available_cores()
    plain, _ = engine.generate(REQUESTS, SAMPLED)
    assert engine.worker_threads() == max(1, cores)  # nothing trains meanwhile: every core samples
    with running_ahead():
        ahead, _ = engine.generate(REQUESTS, SAMPLED)
        assert engine.worker_threads() == 1  # beside an update: rollout.background_threads
    assert _tokens(ahead) == _tokens(plain)  # the same samples on either thread count
    for a, b in zip(ahead, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)

    seen = []
    with running_ahead():
        worker = threading.Thread(target=lambda: seen.append(is_running_ahead()))
        worker.start()
        worker.join()
    assert seen == [False] and not is_running_ahead()  # the mark is the sampling thread's own

    forget_rollouts_ahead()
    before = torch.get_num_threads()
    with sharing_cores(1) as threads:  # no rollout ahead pending: the update keeps every thread
        assert threads == before == torch.get_num_threads()
    rollout_started_ahead()
    try:
        # pending from its start until its round collects it, however far it got: a rule, not a timing
        with sharing_cores(1) as threads:
            assert threads == torch.get_num_threads() == max(1, min(before, cores - 1))
        assert torch.get_num_threads() == before
    finally:
        rollout_collected()
    with sharing_cores(1) as threads:
        assert threads == before
