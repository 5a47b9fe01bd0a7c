"""The install commands: the README's first one installs what a run needs and nothing of the test
tools; the test command adds them; CI runs the test command and the results check."""

from __future__ import annotations

import re
import tomllib

from tests.pipelines.conftest import PROJECT_ROOT

TEST_TOOLS = {"pytest", "dvc", "datasets", "nbclient", "nbformat", "ipykernel", "playwright", "ray", "kedro-viz"}


def _script(name: str) -> str:
    return (PROJECT_ROOT / name).read_text()


def _extras(script: str) -> set[str]:
    """The extras a script installs the project with (`pip install -e ".[a,b]"`)."""
    return {e for group in re.findall(r'-e "\.\[([\w,-]+)\]"', script) for e in group.split(",")}


def _apt(script: str) -> set[str]:
    return {p for line in re.findall(r"apt-get install[^\n]*", script) for p in line.split()[-1:]}


def _project() -> dict:
    return tomllib.loads(_script("pyproject.toml"))["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=~! ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_runtime_install_has_no_test_tools():
    install = _script("scripts/install.sh")
    assert _extras(install) == {"cpu"}
    assert _apt(install) == {"bubblewrap"}  # the code domain's sandbox
    assert not _names(_project()["dependencies"]) & TEST_TOOLS
    assert not _names(_project()["optional-dependencies"]["cpu"]) & TEST_TOOLS


def test_the_test_install_is_the_runtime_plus_every_test_tool():
    test = _script("scripts/test.sh")
    assert "bash scripts/install.sh" in test
    extras = _project()["optional-dependencies"]
    assert _extras(test) <= extras.keys()
    assert TEST_TOOLS <= _names([r for extra in _extras(test) for r in extras[extra]])
    assert _apt(test) == {"chromium"}  # the MLflow UI test's browser
    assert "python -m pytest" in test


def test_ci_runs_the_test_command_and_the_results_check():
    ci = _script(".ci/run")
    assert "bash scripts/test.sh" in ci
    assert "python scripts/results.py check" in ci
