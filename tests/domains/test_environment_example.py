"""The example environment of docs/environments.md runs as written, through the agent loop."""

import re
from pathlib import Path

from rlvr_factory.rollout.agent_loop import RolloutConfig, sample_episodes
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.verification import VerifyConfig, judge
from tests.conftest import make_scripted_policy

DOC = Path(__file__).resolve().parents[2] / "docs/environments.md"
VERIFY = VerifyConfig(workers=1, timeout_seconds=5.0, max_input_chars=100_000)


def documented_example() -> dict:
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL) if "RetryEnvironment" in block
               and "class RetryArithmetic" in block]
    assert len(code.strip().splitlines()) <= 32
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def test_the_retry_example_tells_a_wrong_answer_to_try_again_until_its_attempts_run_out():
    domain = documented_example()["RetryArithmetic"](levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={"test": 3})
    tasks = domain.generate_tasks()
    wrong = make_scripted_policy("\\boxed{-}")  # always the same wrong answer
    episodes, _ = sample_episodes(wrong, domain, tasks, 1, RolloutConfig(max_turns=5), SamplingConfig(max_new_tokens=16,
                                                                                                       temperature=0.0))
    for e in episodes:
        assert len(e.turns) == 3 and e.finish_reason == "attempts" and e.out_of_budget
        assert [t.observation for t in e.turns] == ["Incorrect, try again.", "Incorrect, try again.", ""]
        assert [t.reward for t in e.turns] == [-0.1, -0.1, 0.0] and e.info == {"retries": 2.0}
    scores, _ = judge(domain, [e.score for e in episodes], [e.answer for e in episodes], [t.reference for t in tasks], VERIFY)
    assert [s.correct for s in scores] == [False] * 3
