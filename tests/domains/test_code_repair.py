"""The code-repair domain: procedural mutants of correct programs, SWE-style JSONL rows validated in curate."""

import ast
import json
import random
from collections import Counter

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.code import read_rows
from rlvr_factory.domains.code_repair import PROGRAM_SOURCES, CodeRepairDomain, program_tests
from rlvr_factory.domains.code_repair_edits import Block, apply_edits, parse_edits
from rlvr_factory.domains.code_repair_mutants import (
    KINDS, canonical, mutate, rename_identifiers, repair_patch, sites, wrong_fix,
)
from rlvr_factory.domains.curation import validate
from rlvr_factory.domains.code_tasks import BUILTIN_TASKS

PRIME = "def is_prime(n):\n    if n < 2:\n        return False\n    for i in range(2, n):\n        if n % i == 0:\n            return False\n    return True\n"


@pytest.mark.parametrize("kind, changed", [
    ("operator_swap", "n > 2"), ("off_by_one", "n <= 2"), ("wrong_constant", "n < 4"),
    ("swapped_args", "range(n, 2)"), ("deleted_branch", None),
])
def test_each_kind_plants_its_typical_mistake(kind, changed):
    site = next(s for s in sites(PRIME) if s.kind == kind)
    broken = mutate(PRIME, [site.index])
    assert broken != canonical(PRIME)
    if changed:
        assert changed in broken
    else:
        assert broken.count("if ") == 1


def test_site_numbers_stay_put_when_several_mutations_apply_at_once():
    found = sites(PRIME)
    deleted = next(s for s in found if s.kind == "deleted_branch")  # the first `if` (n < 2)
    last = found[-1]  # the final `return True`
    assert last.kind == "wrong_constant"
    together = mutate(PRIME, [deleted.index, last.index])
    assert "n < 2" not in together and together.rstrip().endswith("return False")
    assert together.count("\n") == canonical(PRIME).count("\n") - 2


def test_the_repair_patch_undoes_the_mutations():
    correct = canonical(PRIME)
    for site in sites(PRIME):
        broken = mutate(PRIME, [site.index])
        patch = repair_patch("solution.py", broken, correct)
        assert apply_edits({"solution.py": broken}, parse_edits(patch), ["solution.py"])["solution.py"] == correct


def test_the_shortest_repair_patch_is_the_fewest_whole_tokens_that_occur_once():
    broken = "def f(a, b):\n    c = a - b\n    return c - 1\n"
    fixed = "def f(a, b):\n    c = a + b\n    return c - 1\n"
    assert parse_edits(repair_patch("solution.py", broken, fixed)) == [Block("solution.py", "a -", "a +")]
    assert parse_edits(repair_patch("solution.py", broken, fixed, "lines")) == [
        Block("solution.py", "    c = a - b", "    c = a + b")]
    # a one-character change inside a token takes the whole token; an inserted `=` takes the operator before it
    assert parse_edits(repair_patch("s.py", "x = 10\n", "x = 11\n")) == [Block("s.py", "10", "11")]
    assert parse_edits(repair_patch("s.py", "if i < n:\n    pass\n", "if i <= n:\n    pass\n")) == [
        Block("s.py", "<", "<=")]
    # no part of the line unique: whole lines around it, widened until they are
    twice = "x = 1\nx = 1\ny = 2\n"
    patch = repair_patch("s.py", twice, "x = 1\nx = 3\ny = 2\n")
    assert apply_edits({"s.py": twice}, parse_edits(patch), ["s.py"])["s.py"] == "x = 1\nx = 3\ny = 2\n"
    with pytest.raises(ValueError, match="patch search"):
        repair_patch("s.py", broken, fixed, "tokens")


@pytest.mark.parametrize("search", ["shortest", "lines"])
def test_every_mutant_s_reference_patch_repairs_it_and_shortest_copies_less(search):
    rows = read_rows(PROGRAM_SOURCES["builtin"])
    shorter = 0
    for row in rows[:20]:
        program, _, _ = program_tests(row)
        correct = canonical(program)
        for site in sites(correct):
            broken = mutate(correct, [site.index])
            if broken == correct:
                continue
            patch = repair_patch("solution.py", broken, correct, search)
            assert apply_edits({"solution.py": broken}, parse_edits(patch), ["solution.py"])["solution.py"] == correct
            lines = sum(len(b.search) for b in parse_edits(repair_patch("solution.py", broken, correct, "lines")))
            copied = sum(len(b.search) for b in parse_edits(patch))
            assert copied <= lines
            shorter += copied < lines
    assert (shorter > 0) == (search == "shortest")


def test_a_wrong_fix_changes_the_bugs_line_into_neither_the_bug_nor_its_repair():
    correct = canonical(PRIME)
    for site in sites(PRIME):
        broken = mutate(PRIME, [site.index])
        decoy = wrong_fix(broken, correct, random.Random(0))
        assert decoy != correct
        if broken.count("\n") == correct.count("\n") == decoy.count("\n"):
            bug_lines = {i for i, (a, b) in enumerate(zip(broken.splitlines(), correct.splitlines())) if a != b}
            assert {i for i, (a, b) in enumerate(zip(broken.splitlines(), decoy.splitlines())) if a != b} <= bug_lines
    assert wrong_fix("def f(a, b):\n    return a - b\n", "def f(a, b):\n    return a + b\n",
                     random.Random(0)) == "def f(a, b):\n    return a - b\n"  # no third option: an edit that changes nothing


@pytest.mark.parametrize("test", ["def check(:", "def check(candidate):\n    assert " + "-" * 300_000 + "1\n"])
def test_a_row_whose_tests_do_not_parse_gives_no_program(test):
    assert program_tests({"prompt": "def f():\n", "test": test, "entry_point": "f"}) is None


@pytest.mark.parametrize("program", ["def f(:\n", "x = " + "-" * 300_000 + "1\n", "x = 1  # " + "y" * 2_000_000])
def test_a_program_that_does_not_parse_or_is_too_large_gets_no_mutants(program):
    with pytest.raises(ValueError, match="the program"):
        canonical(program)
    assert CodeRepairDomain()._program_mutants("builtin", "p", program, ["assert f() == 1"] * 2, [], "train",
                                               random.Random(0)) == []


def test_builtin_rows_give_their_tests_as_named_assert_lines():
    program, tests, imports = program_tests(BUILTIN_TASKS[0])
    assert tests[0] == "assert add(2, 3) == 5" and imports == [] and "def add(a, b)" in program


@pytest.fixture(scope="module")
def domain():
    return CodeRepairDomain(max_programs=10, mutants_per_program=2, mutations=[1, 2], seed=0)


def test_mutants_fail_a_test_have_split_tests_and_difficulty_by_mutation_count(domain):
    tasks = domain.generate_tasks()
    assert tasks and {t.difficulty for t in tasks} == {1, 2}
    for t in tasks:
        reference = t.reference
        assert len(reference["kinds"]) == t.difficulty and set(reference["kinds"]) <= set(KINDS)
        assert not set(reference["visible_tests"]) & set(reference["held_out_tests"])
        assert not any(test in t.prompt for test in reference["held_out_tests"])
        broken = domain.runner.run(domain_workspace(t), reference["files"], reference["held_out_tests"])
        assert not broken.all_passed  # kept only because it fails a held-out test: no reward unrepaired
        assert domain.score(reference["reference_patch"], reference).correct


def domain_workspace(task):
    from rlvr_factory.domains.code_repair_workspace import Workspace
    return Workspace.from_reference(task.reference)


def test_splits_never_share_a_program_and_are_reproducible(domain):
    tasks = domain.generate_tasks()
    split_of = {}
    for t in tasks:
        assert split_of.setdefault(t.reference["program"], t.split) == t.split
    again = CodeRepairDomain(max_programs=10, mutants_per_program=2, mutations=[1, 2], seed=0).generate_tasks()
    assert [t.to_row() for t in again] == [t.to_row() for t in tasks]


def test_programs_whose_prompt_is_too_long_for_the_context_are_left_out(domain):
    short = CodeRepairDomain(max_programs=10, mutants_per_program=2, mutations=[1, 2], seed=0, max_prompt_chars=250)
    kept = short.generate_tasks()
    assert 0 < len(kept) < len(domain.generate_tasks())
    for task in kept:
        broken = task.reference["files"]["solution.py"]
        fixed = apply_edits(task.reference["files"], parse_edits(task.reference["reference_patch"]), ["solution.py"])
        assert len(task.prompt) - len(broken) + len(fixed["solution.py"]) <= 250  # the correct program's prompt
    assert {t.task_id for t in kept} <= {t.task_id for t in domain.generate_tasks()}


RENAMABLE = ("import math\n\n\ndef digits(n, base=10):\n    count = 0\n    while n >= base:\n        n = n // base\n"
             "        count += 1\n    key = sorted([3, 1], key=abs)\n"
             "    return count + 1 + 0 * math.floor(len([d for d in range(3)])) + 0 * len(key)\n")


def test_renaming_replaces_every_local_name_consistently_and_keeps_the_program_working():
    tests = ["assert digits(123) == 3", "assert digits(n=255, base=16) == 2"]
    renamed, renamed_tests = rename_identifiers(RENAMABLE, tests, random.Random(3))
    names = {node.id if isinstance(node, ast.Name) else node.arg for node in ast.walk(ast.parse(renamed))
             if isinstance(node, (ast.Name, ast.arg))}
    assert not {"n", "base", "count", "d", "key"} & names  # arguments, assigned and comprehension variables
    assert "def digits(" in renamed and "math.floor" in renamed and "range(3)" in renamed  # public, imports, builtins
    assert "key=abs" in renamed  # a builtin's keyword keeps its name, even where a local is called `key`
    assert renamed_tests[0] == tests[0]
    keywords = {kw.arg for kw in ast.walk(ast.parse(renamed_tests[1])) if isinstance(kw, ast.keyword)}
    assert len(keywords) == 2 and not keywords & {"n", "base"}  # the call's keywords name the renamed arguments
    namespace = {}
    exec(renamed, namespace)
    for test in renamed_tests:
        exec(test, namespace)  # the renamed tests pass on the renamed program, keyword arguments included
    assert rename_identifiers(RENAMABLE, tests, random.Random(3)) == (renamed, renamed_tests)
    assert rename_identifiers(RENAMABLE, tests, random.Random(4))[0] != renamed
    with pytest.raises(ValueError, match="cannot rename"):
        rename_identifiers("def f(:\n", [], random.Random(0))


def test_renamed_copies_are_train_tasks_of_their_program_with_bugs_that_fail_and_repairs_that_pass():
    plain = CodeRepairDomain(max_programs=8, mutants_per_program=2, seed=0).generate_tasks()
    augmented = CodeRepairDomain(max_programs=8, mutants_per_program=2, seed=0, renamings=2)
    tasks = augmented.generate_tasks()
    renamed = [t for t in tasks if t.task_id not in {p.task_id for p in plain}]
    assert [t.to_row() for t in tasks if t.task_id in {p.task_id for p in plain}] == [p.to_row() for p in plain]
    train_programs = {t.reference["program"] for t in plain if t.split == "train"}
    assert renamed and {t.split for t in renamed} == {"train"}
    assert {t.reference["program"] for t in renamed} == train_programs  # never a held-out program
    assert len({t.prompt for t in renamed} | {t.prompt for t in plain}) == len(renamed) + len(plain)
    for t in renamed:
        workspace = domain_workspace(t)
        assert not augmented.runner.run(workspace, workspace.files, workspace.held_out_tests).all_passed
        assert augmented.score(t.reference["reference_patch"], t.reference).correct
    with pytest.raises(ValueError, match="renamings"):
        CodeRepairDomain(renamings=-1)


def test_more_test_mutants_extend_the_test_split_and_change_no_other_task():
    plain = CodeRepairDomain(max_programs=12, mutants_per_program=2, seed=0).generate_tasks()
    more = CodeRepairDomain(max_programs=12, mutants_per_program=2, test_mutants_per_program=5, seed=0)
    tasks = more.generate_tasks()
    for split in ("train", "validation"):
        assert [t.to_row() for t in tasks if t.split == split] == [t.to_row() for t in plain if t.split == split]
    test, before = [t for t in tasks if t.split == "test"], [t for t in plain if t.split == "test"]
    assert len(test) > len(before) and all(t.to_row() in [x.to_row() for x in test] for t in before)
    assert {t.reference["program"] for t in test} == {t.reference["program"] for t in before}  # more bugs, same programs
    per_program = Counter(t.reference["program"] for t in test)
    assert max(per_program.values()) > 2 and max(per_program.values()) <= 5
    assert len({t.prompt for t in test}) == len(test)
    for t in test:
        workspace = domain_workspace(t)
        assert not more.runner.run(workspace, workspace.files, workspace.held_out_tests).all_passed
        assert more.score(t.reference["reference_patch"], t.reference).correct
    with pytest.raises(ValueError, match="test_mutants_per_program"):
        CodeRepairDomain(test_mutants_per_program=0)


def swe_row(**changes):
    row = {"task_id": "swe-1", "split": "test",
           "files": {"pkg/core.py": "def mul(a, b):\n    return a + b\n", "pkg/__init__.py": "from pkg.core import mul\n",
                     "tests/test_core.py": "assert mul(2, 3) == 6\n"},
           "editable": ["pkg/core.py"], "visible_tests": ["assert mul(2, 3) == 6"],
           "held_out_tests": ["assert mul(4, 5) == 20", "assert mul(0, 9) == 0"],
           "reference_patch": "pkg/core.py\n<<<<<<< SEARCH\n    return a + b\n=======\n    return a * b\n>>>>>>> REPLACE\n"}
    row.update(changes)
    return row


@pytest.mark.parametrize("changes, reason", [
    ({"editable": ["tests/test_core.py"]}, "test files are read-only"),
    ({"editable": ["../escape.py"]}, "leaves the workspace"),
    ({"files": {"/etc/passwd.py": "x = 1\n"}, "editable": ["/etc/passwd.py"]}, "not a plain relative path"),
    ({"held_out_tests": []}, "held_out_tests: expected a non-empty list"),
    ({"visible_tests": ["assert mul(2, 3) =="]}, "SyntaxError"),
    ({"reference_patch": "pkg/core.py\n<<<<<<< SEARCH\nnope\n=======\nx\n>>>>>>> REPLACE\n"}, "does not apply"),
    ({"files": "not a dict"}, "files: expected"),
    ({"files": {**swe_row()["files"], "tests/../../x.py": "x = 1\n"}}, "files: 'tests/../../x.py' is not a plain"),
])
def test_bad_swe_rows_are_quarantined_with_their_reason(tmp_path, changes, reason):
    path = tmp_path / "swe.jsonl"
    path.write_text(json.dumps(swe_row()) + "\n" + json.dumps(swe_row(task_id="swe-2", **changes)) + "\n")
    repair = get_domain({"name": "code_repair", "sources": [], "jsonl": str(path)})
    kept, quarantined = validate(repair.rows(), {"code_repair": repair})
    assert [t.task_id for t in kept] == ["swe-1"]
    assert len(quarantined) == 1 and reason in quarantined[0]["reason"]


def test_an_swe_row_is_a_multi_file_task_the_environment_runs(tmp_path):
    path = tmp_path / "swe.jsonl"
    path.write_text(json.dumps(swe_row()) + "\n")
    repair = get_domain({"name": "code_repair", "sources": [], "jsonl": str(path)})
    [task] = repair.generate_tasks()
    env = repair.environment()
    env.reset(task)
    step = env.step(task.reference["reference_patch"])
    assert step.done and step.score.correct and step.score.breakdown["tests"] == 2.0


@pytest.mark.parametrize("source", ["humaneval", "mbpp"])
def test_humaneval_and_mbpp_programs_give_mutants_their_reference_patch_repairs(source):
    from rlvr_factory.domains.loaders import shared_data_dir

    if not (shared_data_dir() / source).is_dir():
        pytest.skip(f"no shared data at {shared_data_dir()} (set RLVR_SHARED_DATA)")
    repair = CodeRepairDomain(sources=[source], max_programs=6, mutants_per_program=1)
    tasks = repair.generate_tasks()
    assert len(tasks) >= 3 and all(t.source == f"mutant:{source}:seed=0" for t in tasks)
    for t in tasks[:3]:
        assert repair.score(t.reference["reference_patch"], t.reference).correct
        assert not repair.score("DONE", t.reference).correct


def test_the_pretraining_corpus_holds_train_repairs_and_never_a_held_out_task(domain):
    tasks = domain.generate_tasks()
    held_out = {t.prompt for t in tasks if t.split != "train"}
    corpus = domain.pretraining_corpus(50, seed=0, exclude=held_out)
    assert len(corpus) == 50 and not any(p in doc for doc in corpus for p in held_out)
    assert any("<<<<<<< SEARCH" in doc for doc in corpus)


def test_a_feedback_demonstration_is_a_wrong_edit_the_environments_report_and_the_repair(domain):
    demonstrations = [domain.tool_demonstration(t) for t in domain.generate_tasks()]
    episodes = [d for d in demonstrations if len(d) == 3]
    assert episodes and all(len(d) in (1, 3) for d in demonstrations)
    for task, demo in zip(domain.generate_tasks(), demonstrations):
        env = domain.environment()
        env.reset(task)
        if len(demo) == 1:
            assert demo == [task.reference["reference_patch"]]
            continue
        first, observation, second = demo
        step = env.step(first)
        assert not step.done and step.observation == observation and observation.startswith("visible tests: ")
        assert "FAIL" in observation and observation.endswith("(2 edits left)")
        final = env.step(second)
        assert final.done and final.score.correct  # the second edit repairs what the first left


def test_edit_error_decoys_show_an_edit_that_does_not_apply_its_error_and_the_repair(domain):
    decoys = CodeRepairDomain(max_programs=10, mutants_per_program=2, mutations=[1, 2], seed=0, edit_error_decoys=1.0)
    tasks = domain.generate_tasks()
    plain = [domain.tool_demonstration(t) for t in tasks]
    shown = [decoys.tool_demonstration(t) for t in tasks]
    errors = 0
    for task, demo, before in zip(tasks, shown, plain):
        assert len(demo) in (1, 3)
        if len(demo) == 1:
            assert demo == [task.reference["reference_patch"]]
            continue
        first, observation, second = demo
        env = decoys.environment()
        env.reset(task)
        step = env.step(first)
        assert not step.done and step.observation == observation
        if "SEARCH text is" in observation:  # the decoy: the repair's blocks swapped, which do not apply
            errors += 1
            assert second == task.reference["reference_patch"] and observation.startswith("edit error: ")
        else:  # the swapped blocks would apply: the plain wrong-fix episode instead
            assert demo == before
        assert env.step(second).score.correct  # a failed edit leaves the workspace as it was
    assert errors >= len(tasks) // 2


def test_edit_error_decoys_are_a_seeded_share_and_off_by_default(domain):
    tasks = domain.generate_tasks()
    half = CodeRepairDomain(max_programs=10, mutants_per_program=2, mutations=[1, 2], seed=0, edit_error_decoys=0.5)
    errors = sum("SEARCH text is" in d[1] for d in map(half.tool_demonstration, tasks) if len(d) == 3)
    assert 0 < errors < len(tasks)
    assert errors == sum("SEARCH text is" in d[1] for d in map(half.tool_demonstration, tasks) if len(d) == 3)
    assert not any("SEARCH text is" in d[1] for d in map(domain.tool_demonstration, tasks) if len(d) == 3)
    with pytest.raises(ValueError, match="edit_error_decoys"):
        CodeRepairDomain(edit_error_decoys=1.5)
