"""The curate stage: every malformed, duplicated or leaked row is quarantined with its reason and counted,
and every valid row arrives."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.domains.base import Task
from rlvr_factory.domains.curation import (
    carve_validation, curate, decontaminate, deduplicate, difficulty_from_pass_rate, interleave, label_difficulty,
    mix_by_weight, normalise_prompt, validate, validate_row,
)
from rlvr_factory.domains.curation import TaskDecontaminationConfig
from tests.pipelines.conftest import PROJECT_ROOT, base_parameters, make_project, run_pipeline, tracking_uri

DECONTAMINATION = TaskDecontaminationConfig(n=8, threshold=0.5)


def q(text: str, answer: int = 7) -> dict:
    return {"question": text, "answer": f"Work it out.\n#### {answer}"}


VALID_TRAIN = [
    q("Sam bakes twelve muffins every morning and sells nine of them before noon at the market."),
    q("A train leaves the station at three and travels sixty miles each hour for four long hours."),
    q("Maria reads forty pages of her novel on Monday and twice as many pages on Tuesday evening."),
    q("The farmer plants seven rows of corn with eleven plants in every row of the northern field."),
    q("Leo saves five dollars each week from his allowance for a bicycle that costs ninety dollars."),
    q("A baker divides thirty six cookies equally among four boxes for the school fair on Friday."),
]
TEST = [
    q("Nina buys three notebooks for four dollars each and a pen for two dollars at the shop."),
    q("A pool fills at eight liters per minute and holds four hundred eighty liters when full of water."),
    q("Omar runs two miles on weekdays and five miles on each day of the weekend in summer."),
]
MALFORMED = [  # (line, why it must be quarantined by validation)
    ({"question": "How many legs do three spiders have in total when counted together?"}, "answer"),
    ({"question": 42, "answer": "#### 1"}, "prompt: expected a string"),
    (q(""), "prompt: empty"),
    (q("   \n "), "prompt: empty"),
    ({"question": "What is two plus two when added together by a student?", "answer": "It is 4."}, "#### n"),
    ("{this line is not json", "not JSON"),
]
DUPLICATES = [
    VALID_TRAIN[0],  # exact duplicate of a train row
    q("  a TRAIN leaves the station at three, and travels sixty miles each hour for four long hours!"),  # normalised
    TEST[0],  # a test question copied into train
]
LEAK = q("A pool fills at eight liters per minute and holds four hundred eighty liters when it is full.")


def write_sources(tmp_path) -> dict[str, str]:
    train = tmp_path / "train.jsonl"
    lines = [json.dumps(r) for r in VALID_TRAIN]
    lines += [r if isinstance(r, str) else json.dumps(r) for r, _ in MALFORMED]
    lines += [json.dumps(r) for r in [*DUPLICATES, LEAK]]
    train.write_text("\n".join(lines) + "\n")
    test = tmp_path / "test.jsonl"
    test.write_text("\n".join(json.dumps(r) for r in TEST) + "\n")
    return {"train": str(train), "test": str(test)}


def curate_file(tmp_path, validation_from_train=0):
    domain = get_domain({"name": "gsm8k", "sources": write_sources(tmp_path)})
    rows = domain.rows()
    return rows, curate(rows, domain, decontamination=DECONTAMINATION, validation_from_train=validation_from_train,
                        default_difficulty=1, seed=0)


def test_malformed_duplicated_and_leaked_rows_are_quarantined_with_exact_counts(tmp_path):
    rows, result = curate_file(tmp_path)
    assert result.counts["rows"] == len(rows) == 6 + 6 + 3 + 1 + 3
    assert result.counts["quarantined.validate"] == 6
    assert result.counts["removed.deduplicate"] == 3
    assert result.counts["removed.decontaminate"] == 1
    assert len(result.quarantined) == 10
    by_stage = {}
    for record in result.quarantined:
        by_stage.setdefault(record["stage"], []).append(record)
    for (_, why), record in zip(MALFORMED, by_stage["validate"]):
        assert why in record["reason"], record
    assert {r["reason"].split(" of ")[0] for r in by_stage["deduplicate"]} == {
        "duplicate prompt (exact)", "duplicate prompt (normalised)"}
    assert "gsm8k-test-00000" in by_stage["deduplicate"][-1]["reason"]  # the test copy is the one kept
    (leak,) = by_stage["decontaminate"]
    assert "overlap evaluation task gsm8k-test-00001" in leak["reason"]
    assert json.loads(leak["row"])["prompt"] == LEAK["question"]


def test_every_valid_row_arrives_with_its_split(tmp_path):
    _, result = curate_file(tmp_path)
    assert sorted(t.task_id for t in result.tasks) == sorted(
        [f"gsm8k-train-{i:05d}" for i in range(6)] + [f"gsm8k-test-{i:05d}" for i in range(3)])
    assert result.counts["tasks"] == 9 and result.counts["tasks.gsm8k.test"] == 3
    assert len(result.tasks) + len(result.quarantined) == result.counts["rows"]


def test_validation_is_carved_from_train_when_the_sources_have_none(tmp_path):
    _, result = curate_file(tmp_path, validation_from_train=2)
    assert result.counts["tasks.gsm8k.validation"] == 2 and result.counts["tasks.gsm8k.train"] == 4


# the steps one by one

GOOD = {"task_id": "t1", "domain": "arithmetic", "prompt": "Compute 1+1", "reference": '{"answer": "2", "steps": []}',
        "difficulty": 1, "split": "train", "source": "s"}
DOMAINS = {"arithmetic": ArithmeticDomain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={})}


@pytest.mark.parametrize(
    "change,reason",
    [({"task_id": 7}, "task_id: expected a string"), ({"prompt": None}, "prompt: expected a string"),
     ({"domain": "chess"}, "domain: 'chess' is not one of"), ({"split": "dev"}, "split: 'dev'"),
     ({"reference": "{oops"}, "reference: not JSON"), ({"reference": "[1]"}, "expected a JSON object"),
     ({"reference": '{"steps": []}'}, "the arithmetic domain cannot read it"),
     ({"reference": '{"answer": " "}'}, "gold answer is empty"),
     ({"difficulty": "3"}, "difficulty: expected an integer"), ({"difficulty": -1}, "difficulty"),
     ({"_error": "line 3 is not JSON"}, "line 3 is not JSON")],
)
def test_a_row_breaking_the_task_contract_is_refused_with_the_reason(change, reason):
    task, why = validate_row({**GOOD, **change}, DOMAINS)
    assert task is None and reason in why


def test_a_valid_row_becomes_a_task_and_a_missing_difficulty_is_unlabelled():
    task, why = validate_row({**GOOD, "difficulty": None}, DOMAINS)
    assert why is None and task.difficulty == 0 and task.reference == {"answer": "2", "steps": []}


def test_a_repeated_task_id_is_quarantined():
    tasks, quarantined = validate([GOOD, {**GOOD, "prompt": "Compute 2+2"}], DOMAINS)
    assert len(tasks) == 1 and "appears more than once" in quarantined[0]["reason"]


def task(task_id, prompt, split="train", domain="d", difficulty=1):
    return Task(task_id, domain, prompt, {"answer": "1"}, difficulty, split, "s")


def test_duplicates_count_within_a_domain_only():
    kept, removed = deduplicate([task("a", "Same"), task("b", "same", domain="e"), task("c", "SAME!")])
    assert [t.task_id for t in kept] == ["a", "b"] and len(removed) == 1


def test_normalisation_drops_case_spacing_and_sentence_punctuation_but_keeps_operators():
    assert normalise_prompt("  Compute 9 + 6*0.") == normalise_prompt("compute 9+6 * 0") == "compute 9 + 6 * 0"
    assert normalise_prompt("Compute 9+6*0") != normalise_prompt("Compute 9+6+0")


def test_the_generated_arithmetic_splits_have_no_duplicate_prompt():
    tasks = get_domain(yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_curate.yml").read_text())["domain"]).generate_tasks()
    assert deduplicate(tasks)[1] == []


def test_decontamination_threshold_and_skipped_domains():
    long = "one two three four five six seven eight nine ten"
    tasks = [task("e", long, "test"), task("t", long.replace("ten", "eleven"))]
    assert len(decontaminate(tasks, n=8, threshold=0.5)[1]) == 1  # 2 of 3 8-grams shared
    assert len(decontaminate(tasks, n=8, threshold=0.9)[1]) == 0
    assert len(decontaminate(tasks, n=8, threshold=0.5, skip_domains=["d"])[1]) == 0
    assert len(decontaminate(tasks, n=8, threshold=0.5, skip_domains=["*"])[1]) == 0  # a pattern: every domain
    assert len(decontaminate(tasks, n=8, threshold=0.5, skip_domains=["x*"])[1]) == 1
    assert len(decontaminate([task("e", "short", "test"), task("t", "short")], n=8, threshold=0.5)[1]) == 1  # by gist
    with pytest.raises(ValueError, match="threshold"):
        decontaminate(tasks, n=8, threshold=0)


def test_difficulty_comes_from_metadata_else_the_measured_pass_rate_else_the_default():
    tasks = label_difficulty([task("a", "x", difficulty=3), task("b", "y", difficulty=0), task("c", "z", difficulty=0)],
                             {"b": 4}, default=2)
    assert [t.difficulty for t in tasks] == [3, 4, 2]
    assert [difficulty_from_pass_rate(r, 4) for r in (1.0, 0.8, 0.5, 0.1, 0.0)] == [1, 1, 3, 4, 4]


def test_mixing_cuts_the_train_pool_to_the_weights_and_keeps_evaluation_tasks():
    tasks = [task(f"a{i}", f"a{i}", domain="a") for i in range(30)] + [task(f"b{i}", f"b{i}", domain="b") for i in range(30)]
    tasks += [task("ta", "ta", "test", "a"), task("tb", "tb", "test", "b")]
    mixed, left_out = mix_by_weight(tasks, {"a": 2.0, "b": 1.0}, seed=0)
    train = [t for t in mixed if t.split == "train"]
    assert sum(t.domain == "a" for t in train) == 30 and sum(t.domain == "b" for t in train) == 15
    assert left_out == {"a": 0, "b": 15} and {"ta", "tb"} <= {t.task_id for t in mixed}
    assert mixed == mix_by_weight(tasks, {"a": 2.0, "b": 1.0}, seed=0)[0]


def test_a_domain_without_weights_keeps_every_train_task_of_every_member():
    class Unweighted:
        name, weights, members = "families", None, {"a": DOMAINS["arithmetic"], "b": DOMAINS["arithmetic"]}

    rows = [task(f"a{i}", f"a{i}", domain="a").to_row() for i in range(30)] + [task("b0", "b0", domain="b").to_row()]
    curated = curate(rows, Unweighted(), decontamination=DECONTAMINATION, validation_from_train=0,
                     default_difficulty=1, seed=0)
    assert curated.counts["tasks.a.train"] == 30 and curated.counts["tasks.b.train"] == 1
    assert not any(k.startswith("mix_left_out") for k in curated.counts)


def test_carving_validation_is_seeded_and_skips_domains_that_have_some():
    tasks = [task(f"a{i}", f"a{i}") for i in range(10)] + [task("v", "v", "validation", "e"), task("e1", "e1", "train", "e")]
    carved = carve_validation(tasks, 3, seed=1)
    assert sum(t.split == "validation" and t.domain == "d" for t in carved) == 3
    assert [t.split for t in carved if t.domain == "e"] == ["validation", "train"]
    assert carved == carve_validation(tasks, 3, seed=1)


# the Kedro stage


def test_the_curate_pipeline_writes_the_quarantine_table_and_logs_counts_to_mlflow(tmp_path):
    project = make_project(tmp_path / "project")
    conf = project / "conf/base/parameters_curate.yml"
    params = yaml.safe_load(conf.read_text())
    params["domain"] = {"name": "gsm8k", "sources": write_sources(tmp_path)}
    params["curate"]["validation_from_train"] = 2
    conf.write_text(yaml.safe_dump(params))
    run_pipeline(project, {}, pipeline="curate")
    quarantine = pd.read_parquet(project / "data/02_intermediate/quarantine.parquet")
    assert quarantine["stage"].value_counts().to_dict() == {"validate": 6, "deduplicate": 3, "decontaminate": 1}
    assert len(pd.read_parquet(project / "data/03_primary/tasks.parquet")) == 9
    assert len(pd.read_parquet(project / "data/05_model_input/validation_tasks.parquet")) == 2
    client = MlflowClient(tracking_uri=tracking_uri(project))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    metrics = run.data.metrics
    assert metrics["curate.quarantined.validate"] == 6 and metrics["curate.removed.decontaminate"] == 1
    assert metrics["curate.tasks"] == 9


def test_domains_take_turns_so_any_prefix_of_a_split_is_mixed():
    tasks = [task("a1", "a1", domain="a"), task("a2", "a2", domain="a"), task("a3", "a3", domain="a"),
             task("b1", "b1", domain="b")]
    assert [t.task_id for t in interleave(tasks)] == ["a1", "b1", "a2", "a3"]
    assert interleave(tasks[:3]) == tasks[:3]


def test_unlabelled_tasks_get_their_difficulty_from_a_named_models_pass_rate(tmp_path):
    from rlvr_factory.models.policy import save_policy
    from rlvr_factory.parameters import CurateConfig
    from rlvr_factory.pipelines.curate.nodes import curate_tasks
    from rlvr_factory.verification import VerifyConfig
    from tests.conftest import make_scripted_policy

    save_policy(make_scripted_policy("\\boxed{3}"), str(tmp_path / "model"))
    problems = tmp_path / "math.jsonl"
    problems.write_text("".join(json.dumps({"problem": f"Problem {i}: what is it?", "solution": f"\\boxed{{{a}}}",
                                            "answer": str(a)}) + "\n" for i, a in enumerate((3, 4))))
    curate_params = base_parameters()["curate"]
    curate_params["difficulty"].update(model=str(tmp_path / "model"), samples=2, levels=4,
                                       sampling={"max_new_tokens": 12, "temperature": 1.0})
    tasks, quarantine, metrics = curate_tasks({"name": "math", "sources": {"test": str(problems)}},
                                              CurateConfig(**curate_params),
                                              VerifyConfig(workers=1, timeout_seconds=10.0, max_input_chars=10_000))
    assert dict(zip(tasks["prompt"], tasks["difficulty"])) == {"Problem 0: what is it?": 1, "Problem 1: what is it?": 4}
    assert quarantine.empty and metrics["tasks"]["value"] == 2.0
