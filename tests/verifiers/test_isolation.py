"""The scoring sandbox: a verifier whose full check evaluates model output runs it there, one process per row,
and no row can reach the host or change what a later row is scored with. Attacked through `EvalScorer`, a
scorer that `eval`s the completion as unsafe third-party scorers do."""

import os
import pickle
import shutil

import pytest

from rlvr_factory.verifiers.isolation import (
    OWN, PARSE, SANDBOX, CheckLimits, Sandboxed, isolation_of, server_for, verdict,
)
from rlvr_factory.verifiers.pool import VerifierPool
from tests.verifiers.evil_scorers import EvalScorer

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the scoring sandbox needs bubblewrap")

REBIND_MODULE = "setattr(__import__('tests.verifiers.evil_scorers', fromlist=['_']), 'PAY_EVERYTHING', True)"
REBIND_METHOD = ("setattr(__import__('tests.verifiers.evil_scorers', fromlist=['_']).EvalScorer, 'full_check', "
                 "__import__('tests.verifiers.evil_scorers', fromlist=['_']).EvalScorer.pay)")
REBIND_BUILTIN = ("setattr(__import__('builtins'), 'int', "
                  "lambda *a, **k: type('Any', (), {'__eq__': lambda s, o: True})())")


def test_the_scorer_under_attack_is_really_unsafe_outside_the_sandbox():
    """The control: in one process, each rebinding attack makes the next, wrong, row paid."""
    for attack in (REBIND_MODULE, REBIND_METHOD, REBIND_BUILTIN):
        import builtins

        import tests.verifiers.evil_scorers as module
        saved = (module.PAY_EVERYTHING, EvalScorer.full_check, builtins.int)
        scorer = EvalScorer()
        try:
            scorer.full_check(attack, "0")
            paid = scorer.full_check("1 + 1", "5").reward
        finally:
            module.PAY_EVERYTHING, EvalScorer.full_check, builtins.int = saved
        assert paid == 1.0


@pytest.mark.parametrize("attack", [REBIND_MODULE, REBIND_METHOD, REBIND_BUILTIN])
def test_no_row_changes_what_the_next_row_is_scored_with(attack):
    scorer = EvalScorer()
    scorer.score(attack, "0")
    assert scorer.score("1 + 1", "5").reward == 0.0
    assert scorer.score("2 + 3", "5").correct


@pytest.mark.parametrize("attack", [REBIND_MODULE, REBIND_METHOD, REBIND_BUILTIN])
def test_in_a_pool_worker_no_row_changes_the_next_one(attack):
    with VerifierPool(EvalScorer(), workers=1, timeout=5.0) as pool:
        scores = pool.score_many([(attack, "0"), ("1 + 1", "5"), ("7 * 6", "41"), ("2 + 3", "5")])
    assert [s.reward for s in scores[1:]] == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("template", [
    "__import__('pathlib').Path('{canary}').touch()",
    "open('{canary}', 'w').write('x')",
    "__import__('os').system('touch {canary}')",
])
def test_a_check_cannot_write_on_the_host(tmp_path, template):
    canary = tmp_path / "canary"
    score = EvalScorer().score(template.format(canary=canary), "0")
    assert not canary.exists()
    assert score.reward == 0.0


def test_a_check_cannot_fork_write_files_or_see_the_host_environment(tmp_path, monkeypatch):
    scorer = EvalScorer()
    fork = scorer.score("__import__('os').fork()", "0")
    assert fork.status == "error" and "BlockingIOError" in fork.message
    written = scorer.score("__import__('os').write(__import__('os').open('/tmp/x', 65), b'y')", "1")  # O_WRONLY|O_CREAT
    assert written.status == "error" and written.reward == 0.0
    monkeypatch.setenv("RLVR_SECRET", "42")
    server_for(scorer).close()  # a new server, started with the secret in this process's environment
    assert scorer.score("int(__import__('os').environ.get('RLVR_SECRET', 0))", "42").reward == 0.0


def test_a_check_that_hangs_is_a_timeout_and_the_next_row_is_judged():
    scorer = EvalScorer(timeout_s=1.0)
    hung = scorer.score("[x for x in iter(int, 1)]", "0")
    assert hung.status == "timeout" and hung.reward == 0.0
    assert scorer.score("2 + 3", "5").correct


def test_a_check_that_kills_its_server_is_an_error_and_the_server_is_replaced():
    scorer = EvalScorer()
    server = server_for(scorer)
    scorer.score("0", "0")
    starts = server.starts
    killed = scorer.score("__import__('os').kill(__import__('os').getppid(), 9)", "0")
    assert killed.status == "error" and killed.reward == 0.0
    assert scorer.score("2 + 3", "5").correct and server.starts == starts + 1


def test_a_check_cannot_write_to_the_servers_pipes():
    """Every descriptor but the row's own reply pipe is closed before the check runs."""
    scorer = EvalScorer()
    forged = "[__import__('os').write(fd, b'junk') for fd in range(3, 64)]"
    assert scorer.score(forged, "0").status == "error"
    assert scorer.score("2 + 3", "5").correct and scorer.score("2 + 2", "5").reward == 0.0


@pytest.mark.parametrize("reply", [
    ("reply", pickle.dumps(("score", float("nan"), True, "ok", {}, "")), 0),
    ("reply", pickle.dumps(("score", 1.0, 1, "ok", {}, "")), 0),
    ("reply", pickle.dumps(("score", 1.0, True, "great", {}, "")), 0),
    ("reply", pickle.dumps(("score", 1.0, True, "ok", {"outcome": float("inf")}, "")), 0),
    ("reply", pickle.dumps(os.system), 0),
    ("reply", b"not a pickle", 0),
    ("reply", b"", -9),
    ("something else",),
])
def test_a_malformed_or_forged_verdict_is_an_error(reply):
    score = verdict(reply, CheckLimits())
    assert score.status == "error" and score.reward == 0.0


def test_every_domains_verifier_declares_where_its_full_check_runs():
    from rlvr_factory.verifiers.cad import CadVerifier
    from rlvr_factory.verifiers.code import CodeVerifier
    from rlvr_factory.verifiers.fields import FieldsVerifier
    from rlvr_factory.verifiers.math import MathVerifier
    from rlvr_factory.verifiers.reasoning_gym import ReasoningGymVerifier

    assert {cls: isolation_of(cls) for cls in (MathVerifier, ReasoningGymVerifier, FieldsVerifier, CodeVerifier,
                                                 CadVerifier)} == {
        MathVerifier: SANDBOX, ReasoningGymVerifier: SANDBOX, FieldsVerifier: PARSE, CodeVerifier: OWN,
        CadVerifier: OWN}
    for cls in (MathVerifier, ReasoningGymVerifier):
        assert cls.score is Sandboxed.score  # a sandboxed verifier cannot score outside its sandbox


def test_check_limits_refuse_non_finite_and_non_positive_values():
    for bad in (float("nan"), float("inf"), 0, -1, True):
        with pytest.raises(ValueError):
            CheckLimits(timeout_s=bad)


def test_a_pool_without_the_sandbox_it_needs_fails_at_once_saying_what_to_install(monkeypatch):
    """On a machine without bubblewrap every check would be an infra_error: the pool refuses to start instead."""
    import rlvr_factory.sandbox.backends as backends
    from rlvr_factory.sandbox import SandboxStartError

    monkeypatch.setattr(backends.shutil, "which", lambda name: None)
    with pytest.raises(SandboxStartError, match="apt-get install -y bubblewrap"):
        VerifierPool(EvalScorer(), workers=1)
