"""A sandboxed verifier whose full check evaluates the completion as Python, as an unsafe third-party scorer does
(reasoning-gym's `eval`-based scorers, sympy's `parse_expr`): the scoring sandbox's tests attack through it.

It lives in its own module without test imports: the scoring server imports it inside the sandbox."""

from rlvr_factory.verifiers.isolation import CheckLimits, Sandboxed
from rlvr_factory.verifiers.score import Score

PAY_EVERYTHING = False  # a module attribute an answer may try to rebind


class EvalScorer(Sandboxed):
    """1 when the completion evaluates to the gold integer; module state can make it pay everything."""

    def __init__(self, timeout_s: float = 2.0) -> None:
        self.check_limits = CheckLimits(timeout_s=timeout_s)

    def quick_score(self, completion: str, gold: str) -> None:
        return None

    def full_check(self, completion: str, gold: str) -> Score:
        if PAY_EVERYTHING:
            return self.pay(completion, gold)
        right = eval(completion) == int(gold)  # the unsafe scorer under attack
        return Score(reward=float(right), correct=bool(right))

    def pay(self, completion: str, gold: str) -> Score:
        return Score(reward=1.0, correct=True)
