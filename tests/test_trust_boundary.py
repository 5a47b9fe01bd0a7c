"""The trust boundary in the source (docs/security.md): nothing in-process evaluates untrusted text.

Every call that evaluates text as code (`eval`, `exec`, `compile`, sympy's `parse_expr` and `sympify`, `__import__`)
and every call into a third-party scorer (reasoning-gym's `score_answer`, Math-Verify's `parse` and `verify`) is
found in the project's source by its syntax tree; each must sit in a function this file allows, with the reason
it is safe. A new one fails here until it is placed behind the boundary (the scoring sandbox, a sandboxed
program) and listed with its reason.
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rlvr_factory"
EVALUATING = {"eval", "exec", "compile", "parse_expr", "sympify", "__import__"}
SCORERS = {"score_answer", "get_score_answer_fn"}  # reasoning-gym's
MATH_VERIFY = {"parse", "verify"}  # called by these names where imported from math_verify

# (module, function) -> why the call there is safe
ALLOWED = {
    ("sandbox/agent.py", "serve_program"): "the agent runs only inside a sandbox: it execs the sandboxed program",
    ("sandbox/agent.py", "main"): "imports the standard library's modules named in _PRELOAD, inside the sandbox",
    ("sandbox/agent.py", "_load_module"): "runs the host's own preloaded module (the code judge) in the sandbox agent",
    ("sandbox/agent.py", "start_child"): "imports a task's test imports in the sandboxed judge, before its candidate forks",
    ("verifiers/code_judge.py", "_run"): "the task's prompt or set-up, in the sandboxed judge (the module is loaded "
                                         "into code sandboxes; the host only reads its source and pure helpers)",
    ("verifiers/code_judge.py", "_run_humaneval"): "a HumanEval check, in the sandboxed judge",
    ("verifiers/code_judge.py", "_run_mbpp"): "MBPP assert lines, in the sandboxed judge",
    ("verifiers/reasoning_gym.py", "scorer"): "builds a family's scorer; called by family_score only",
    ("verifiers/math.py", "_mv_parse"): "Math-Verify's parser: reached from full_check only (the scoring sandbox)",
    ("verifiers/math.py", "full_check"): "Math-Verify's verify: full_check runs in the scoring sandbox",
    ("verifiers/math.py", "_sides_agree"): "Math-Verify's verify: called by full_check only (the scoring sandbox)",
}
# functions that call a scorer-reaching function, and where they may be called from
SCORER_CALLERS = {
    ("verifiers/reasoning_gym.py", "family_score"): {
        ("verifiers/reasoning_gym.py", "full_check"): "in the scoring sandbox",
        ("domains/reasoning_gym.py", "_problem"): "the generator's own reference answer, in a generation worker",
    },
}


def _callee(call: ast.Call) -> str | None:
    """A call's callee name: `f` of `f(...)` and of `x.f(...)`, but `eval`/`exec`/`compile` only as bare builtins
    (`model.eval()` and `re.compile()` evaluate nothing)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr not in {"eval", "exec", "compile"}:
        return func.attr
    return None


def _calls(tree: ast.AST, names: set[str]) -> list[tuple[str, int, str]]:
    """(callee, line, enclosing function) of every call to one of `names`."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Call) and _callee(child) in names:
                found.append((_callee(child), child.lineno, function))
            visit(child, function)

    visit(tree, "<module>")
    return found


def _math_verify_names(tree: ast.Module) -> set[str]:
    """The names a module imports from math_verify that evaluate (parse, verify)."""
    return {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "math_verify"
            for a in node.names if a.name in MATH_VERIFY}


def evaluating_calls() -> list[tuple[str, str, str, int]]:
    """(module, function, callee, line) of every evaluating or scorer call in the source."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = str(path.relative_to(SRC))
        out += [(module, fn, name, line) for name, line, fn in _calls(tree, EVALUATING | SCORERS | _math_verify_names(tree))]
    return out


def test_every_call_that_evaluates_text_is_behind_the_boundary():
    outside = [f"{m}:{line} {name}() in {fn}" for m, fn, name, line in evaluating_calls() if (m, fn) not in ALLOWED]
    assert outside == [], "evaluating calls outside the allowed places (docs/security.md): " + "; ".join(outside)


def test_every_allowed_place_still_exists():
    present = {(m, fn) for m, fn, _, _ in evaluating_calls()}
    assert set(ALLOWED) <= present, f"stale entries: {set(ALLOWED) - present}"


@pytest.mark.parametrize("target", sorted(SCORER_CALLERS))
def test_scorer_reaching_functions_are_called_only_from_allowed_places(target):
    module_of, function = target
    callers = {(str(path.relative_to(SRC)), fn) for path in sorted(SRC.rglob("*.py"))
               for _, _, fn in _calls(ast.parse(path.read_text()), {function})}
    assert callers == set(SCORER_CALLERS[target]), callers


def test_the_scan_finds_what_it_looks_for():
    """The scanner itself: each form of call is found, and model.eval() / re.compile() are not."""
    tree = ast.parse("def f(x):\n    eval(x)\n    exec(x)\n    sympy.sympify(x)\n    parse_expr(x)\n"
                     "    model.eval()\n    re.compile(x)\n    scorer.score_answer(x, {})\n")
    assert [name for name, _, _ in _calls(tree, EVALUATING | SCORERS)] == [
        "eval", "exec", "sympify", "parse_expr", "score_answer"]


def test_sandboxed_verifiers_cannot_score_outside_their_sandbox():
    from rlvr_factory.verifiers.isolation import Sandboxed

    import rlvr_factory.verifiers.math  # noqa: F401
    import rlvr_factory.verifiers.reasoning_gym  # noqa: F401

    subclasses = Sandboxed.__subclasses__()
    assert subclasses and all(cls.score is Sandboxed.score for cls in subclasses)
