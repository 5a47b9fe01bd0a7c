"""The code domain: the built-in tasks, the HumanEval/MBPP loaders, splits, demonstrations and corpus."""

from __future__ import annotations

import gzip
import json

import pytest

from rlvr_factory.domains import get_domain, tasks_from_frame, tasks_to_frame
from rlvr_factory.domains.code import CodeDomain, read_rows, row_to_task
from rlvr_factory.domains.code_tasks import BUILTIN_TASKS
from rlvr_factory.verification import VerifyConfig, verify_batch
from tests.pipelines.conftest import round_table
from tests.sandbox.procs import needs_bwrap

VERIFY = VerifyConfig(workers=2, timeout_seconds=20.0, max_input_chars=100_000)
HUMANEVAL_ROW = {"task_id": "HE/0", "prompt": 'def inc(x):\n    """Add one."""\n', "canonical_solution": "    return x + 1\n",
                 "test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"}
MBPP_ROW = {"task_id": 7, "prompt": "Write a function to double a number.", "code": "def double(x):\n    return 2 * x",
            "test_imports": [], "test_list": ["assert double(2) == 4", "assert double(0) == 0"]}


def test_the_builtin_set_has_about_50_tasks_over_four_levels():
    assert len(BUILTIN_TASKS) >= 50
    assert {t["difficulty"] for t in BUILTIN_TASKS} == {1, 2, 3, 4}
    assert len({t["task_id"] for t in BUILTIN_TASKS}) == len({t["entry_point"] for t in BUILTIN_TASKS}) == len(BUILTIN_TASKS)


@needs_bwrap
def test_every_builtin_solution_passes_and_every_stub_fails_through_verify_batch():
    domain = CodeDomain(splits={"train": len(BUILTIN_TASKS)})
    tasks = domain.generate_tasks()
    completions = [domain.demonstration(t) for t in tasks] + [domain.demonstration(t, worked=False) for t in tasks]
    completions += ["    return None\n"] * len(tasks)
    scores, stats = verify_batch(domain, completions, [t.reference for t in tasks] * 3, VERIFY)
    n = len(tasks)
    assert [s.correct for s in scores] == [True] * (2 * n) + [False] * n
    assert all(s.status == "ok" for s in scores) and stats["infra_errors"] == 0


def test_splits_are_seeded_disjoint_and_sized():
    domain = get_domain({"name": "code", "splits": {"train": 30, "validation": 10, "test": 10}, "seed": 3})
    tasks = domain.generate_tasks()
    by_split = {s: [t.task_id for t in tasks if t.split == s] for s in ("train", "validation", "test")}
    assert [len(v) for v in by_split.values()] == [30, 10, 10]
    assert len({i for v in by_split.values() for i in v}) == 50
    assert [t.task_id for t in CodeDomain(splits=domain.splits, seed=3).generate_tasks()] == [t.task_id for t in tasks]
    assert [t.task_id for t in CodeDomain(splits=domain.splits, seed=4).generate_tasks()] != [t.task_id for t in tasks]
    assert tasks_from_frame(tasks_to_frame(tasks)) == tasks


def test_asking_for_more_tasks_than_the_source_has_is_refused():
    with pytest.raises(ValueError, match="lower domain.splits"):
        CodeDomain(splits={"train": 1000}).generate_tasks()


def test_humaneval_and_mbpp_rows_load_from_jsonl_and_gzip(tmp_path):
    plain, packed = tmp_path / "mbpp.jsonl", tmp_path / "he.jsonl.gz"
    plain.write_text(json.dumps(MBPP_ROW) + "\n\n")
    with gzip.open(packed, "wt") as f:
        f.write(json.dumps(HUMANEVAL_ROW) + "\n")
    (mbpp,) = CodeDomain(str(plain), splits={"test": 1}).generate_tasks()
    (he,) = CodeDomain(str(packed), splits={"test": 1}).generate_tasks()
    assert mbpp.reference["format"] == "mbpp" and mbpp.reference["entry_point"] == "double"
    assert "assert double(2) == 4" in mbpp.prompt and mbpp.split == "test"
    assert he.prompt == HUMANEVAL_ROW["prompt"] and he.reference["solution"] == "    return x + 1\n"
    assert "solution" not in json.loads(CodeDomain.gold(he.reference))


def test_a_dataset_id_or_directory_goes_through_load_dataset(tmp_path):
    pytest.importorskip("datasets", reason="the data extra (datasets) is not installed: pip install -e '.[data]'")
    folder = tmp_path / "dataset"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps(MBPP_ROW) + "\n" + json.dumps(dict(MBPP_ROW, task_id=8)) + "\n")
    options = {"cache_dir": str(tmp_path / "cache")}
    from_dir = CodeDomain(str(folder), splits={"train": 2}, hf_split="train", hf_options=options).generate_tasks()
    from_builder = CodeDomain("json", splits={"train": 2}, hf_split="train",
                              hf_options={**options, "data_files": str(folder / "train.jsonl")}).generate_tasks()
    assert [t.task_id for t in from_dir] == [t.task_id for t in from_builder] and len(from_dir) == 2
    assert from_dir[0].reference["test_list"] == MBPP_ROW["test_list"]


def test_bad_sources_and_rows_say_what_is_wrong(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(MBPP_ROW) + "\n{oops\n")
    with pytest.raises(ValueError, match="broken.jsonl: line 2 is not JSON"):
        read_rows(str(broken))
    with pytest.raises(ValueError, match="cannot load code tasks"):
        read_rows(str(tmp_path / "missing"), hf_options={"cache_dir": str(tmp_path / "cache")})
    with pytest.raises(ValueError, match="HumanEval fields"):
        row_to_task({"question": "?"}, "x")


def test_demonstrations_are_a_fenced_program_or_the_bare_code():
    domain = CodeDomain()
    task = next(t for t in domain.generate_tasks() if t.reference["entry_point"] == "add")
    assert domain.demonstration(task) == f"```python\n{task.prompt}    return a + b\n```"
    assert domain.demonstration(task, worked=False) == "    return a + b\n"


def test_the_pretraining_corpus_leaves_out_held_out_prompts():
    domain = CodeDomain()
    held_out = {t.prompt for t in domain.generate_tasks() if t.split != "train"}
    corpus = domain.pretraining_corpus(200, seed=0, exclude=held_out)
    assert len(corpus) == 200 and corpus == domain.pretraining_corpus(200, seed=0, exclude=held_out)
    assert not any(doc.startswith(prompt) for doc in corpus for prompt in held_out)
    assert len(set(corpus)) == len(BUILTIN_TASKS) - len(held_out)
    with pytest.raises(ValueError, match="held out"):
        domain.pretraining_corpus(5, 0, {t["prompt"] for t in BUILTIN_TASKS})


@pytest.mark.slow
@needs_bwrap
def test_the_embedded_default_trains_on_code_end_to_end(tmp_path):
    """`kedro run --env code`: curate, pre-train, SFT, RL rounds and evaluation on the built-in tasks."""
    from tests.pipelines.conftest import TINY_PARAMS, make_project, run_pipeline

    project = make_project(tmp_path)
    run_pipeline(project, {k: v for k, v in TINY_PARAMS.items() if k != "domain"}, env="code")
    scored = round_table(project / "data/envs/code/07_model_output/scored/round_001.parquet")
    assert len(scored) == 16 and set(scored["status"]) <= {"ok", "timeout"}
    assert {"outcome", "process", "hack_suspected"} <= set(scored["reward_breakdown"].iloc[0])
    report = json.loads((project / "data/envs/code/08_reporting/rl_eval.json").read_text())
    assert report["num_tasks"] == 8.0
