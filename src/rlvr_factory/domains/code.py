"""The code domain: Python function tasks judged by running their tests in a sandbox.

Task sources: the team's built-in set (`source: builtin`, `domains/code_tasks.py`), a local
HumanEval- or MBPP-format JSONL file (`.jsonl` / `.jsonl.gz`), or a Hugging Face dataset id
or local dataset directory read through `datasets.load_dataset` (`hf_split`, `hf_options`).
Rows of either format become the same tasks; the reference holds the tests (and the reference
solution, which `gold` leaves out), and `CodeVerifier` scores completions against it.
"""

from __future__ import annotations

import ast
import json
import random
from typing import Any, Mapping

from rlvr_factory.domains.base import AnswerForm, Task
from rlvr_factory.domains.code_tasks import BUILTIN_TASKS
from rlvr_factory.domains.loaders import ERROR_KEY, read_records
from rlvr_factory.verifiers.code import CodeTask, CodeVerifier
from rlvr_factory.verifiers.score import Score


def read_rows(source: str, hf_split: str = "test", hf_options: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The raw task rows of a source: `builtin`, or any source `loaders.read_records` reads (a local
    .jsonl/.jsonl.gz/.parquet file, a dataset directory or id for `datasets`, `shared:` paths)."""
    if source == "builtin":
        return [dict(row) for row in BUILTIN_TASKS]
    try:
        rows = read_records(source, split=hf_split, **dict(hf_options or {}))
    except Exception as e:  # noqa: BLE001 - say which source failed and what the options were
        raise ValueError(
            f"cannot load code tasks from {source!r} (split {hf_split!r}): {e}; give 'builtin', a .jsonl(.gz) "
            "or .parquet file, or a dataset id / directory that datasets reads"
        ) from e
    for row in rows:
        if ERROR_KEY in row:
            raise ValueError(f"{source}: {row[ERROR_KEY]}")
    return rows


def _difficulty(solution: str) -> int:
    """A level from 1 to 4 for an external task, by the length of its reference solution in lines."""
    lines = len([line for line in solution.splitlines() if line.strip()])
    return 1 if lines <= 3 else 2 if lines <= 8 else 3 if lines <= 16 else 4


def row_to_task(row: Mapping[str, Any], source: str) -> Task:
    """A HumanEval-format (prompt, test, entry_point) or MBPP-format (prompt, code, test_list) row as a Task."""
    if {"prompt", "test", "entry_point"} <= row.keys():
        reference = {"format": "humaneval", "prompt": row["prompt"], "test": row["test"],
                     "entry_point": row["entry_point"], "solution": row.get("canonical_solution", "")}
        prompt = row["prompt"]
    elif {"test_list", "code"} <= row.keys():
        tests = list(row["test_list"])
        reference = {"format": "mbpp", "test_list": tests, "test_imports": list(row.get("test_imports") or []),
                     "test_setup": row.get("test_setup_code") or "", "solution": row["code"]}
        reference["entry_point"] = next(
            (n for n in CodeTask.from_reference(reference).candidate_names() if f"def {n}" in row["code"]),
            CodeTask.from_reference(reference).entry_point,
        )
        text = row.get("prompt") or row.get("text") or ""
        prompt = f"{text}\nYour code should pass this test:\n{tests[0]}\n"
    else:
        raise ValueError(
            f"a code task row needs HumanEval fields (prompt, test, entry_point) or MBPP fields "
            f"(code, test_list); got {sorted(row.keys())}"
        )
    CodeTask.from_reference(reference)  # validates the tests parse
    difficulty = int(row.get("difficulty") or _difficulty(reference["solution"]))
    return Task(task_id=str(row.get("task_id")), domain="code", prompt=prompt, reference=reference,
                difficulty=difficulty, split="", source=source)


def cycled(documents: list[str], size: int, seed: int) -> list[str]:
    """`size` documents: passes over `documents`, each in its own seeded order (the last pass cut short)."""
    rng = random.Random(seed)
    corpus: list[str] = []
    while len(corpus) < size:
        batch = list(documents)
        rng.shuffle(batch)
        corpus += batch[: size - len(corpus)]
    return corpus


def python_expression(text: str, limit: int = 10_000) -> str:
    """`text` itself when it parses as one Python expression (parsing only, at most `limit` characters), else
    its string literal."""
    try:
        if len(text) <= limit and text.strip():
            ast.parse(text, mode="eval")
            return text
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        pass
    return repr(text)


class CodeDomain:
    """Python function tasks with tests; the reward runs them in a sandbox (see verifiers/code.py)."""

    name = "code"
    verifier_class = CodeVerifier  # the reward, built from the block's `verifier` options

    def __init__(
        self,
        source: str = "builtin",
        splits: Mapping[str, int] | None = None,
        seed: int = 0,
        hf_split: str = "test",  # the split load_dataset reads, for dataset ids
        hf_options: Mapping[str, Any] | None = None,  # further arguments of load_dataset
        verifier: Mapping[str, Any] | None = None,  # CodeVerifier's settings: sandbox backend, limits, reward weights
    ) -> None:
        self.source = source  # builtin | a .jsonl(.gz) file | a dataset id or directory for load_dataset
        self.splits = dict(splits or {"train": 38, "validation": 8, "test": 8})  # tasks per split
        self.seed = seed  # which tasks go to which split
        self.hf_split = hf_split
        self.hf_options = dict(hf_options or {})
        self.verifier = self.verifier_class(**(verifier or {}))

    def generate_tasks(self) -> list[Task]:
        """The source's tasks, shuffled with `seed` and cut into the splits in order (train first)."""
        rows = read_rows(self.source, self.hf_split, self.hf_options)
        tasks = sorted((row_to_task(row, self.source) for row in rows), key=lambda t: t.task_id)
        wanted = sum(self.splits.values())
        if wanted > len(tasks):
            raise ValueError(f"splits ask for {wanted} tasks but {self.source!r} has {len(tasks)}; lower domain.splits")
        random.Random(self.seed).shuffle(tasks)
        out, start = [], 0
        for split, count in self.splits.items():
            out += [Task(**{**t.__dict__, "split": split}) for t in tasks[start : start + count]]
            start += count
        return out

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The tests the verifier runs, as JSON (the reference solution left out)."""
        return json.dumps({k: v for k, v in reference.items() if k != "solution"}, sort_keys=True)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The reference solution: the whole program in a fenced block, or (`worked=False`) the code alone
        (for HumanEval-format tasks, the body continuing the prompt)."""
        reference = task.reference
        if reference["format"] == "humaneval":
            return f"```python\n{reference['prompt']}{reference['solution']}```" if worked else reference["solution"]
        return f"```python\n{reference['solution'].rstrip()}\n```" if worked else reference["solution"]

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """Verify one completion in this process's sandbox (the pipeline verifies through a worker pool)."""
        return self.verifier.score(completion, self.gold(reference))

    def answer_form(self, task: Task) -> AnswerForm:
        """How the reward audit states an answer: a program whose function returns it (as the Python expression
        it is, when it parses as one, else as a string); a program has no reference answer text."""
        name = CodeTask.from_reference(task.reference).candidate_names()[0]
        return AnswerForm({"answer": None}, lambda texts: (
            f"```python\ndef {name}(*args, **kwargs):\n    return {python_expression(texts['answer'])}\n```"))

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Solved tasks (prompt and solution as one program), none whose prompt is in `exclude`, cycled to `size`."""
        documents = [
            t.prompt + t.reference["solution"] if t.reference["format"] == "humaneval"
            else f"# {t.prompt.strip()}\n{t.reference['solution'].rstrip()}\n"
            for t in (row_to_task(row, self.source) for row in read_rows(self.source, self.hf_split, self.hf_options))
            if t.prompt not in exclude
        ]
        if not documents:
            raise ValueError("every task of the source is held out; nothing is left to pre-train on")
        return cycled(documents, size, seed)
