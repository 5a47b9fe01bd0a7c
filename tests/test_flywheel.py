"""The data flywheel: logged interactions become verified train tasks, nothing unverifiable trains,
duplicates and evaluation look-alikes are held back with their reason, and the next curate picks the pool up."""

import json

import pytest

from rlvr_factory.datasets import JSONLinesDataset
from rlvr_factory.domains import Task, get_domain
from rlvr_factory.flywheel import SOURCE, ingest, regression_set, task_id
from rlvr_factory.json_lines import read_json_lines
from rlvr_factory.pipelines.curate.nodes import curate_tasks
from rlvr_factory.pipelines.flywheel.nodes import collect_regression, evaluate_regression, ingest_interactions
from rlvr_factory.verification import VerifyConfig
from rlvr_factory.domains.curation import TaskDecontaminationConfig
from rlvr_factory.parameters import CurateConfig, EvaluateConfig
from tests.conftest import make_scripted_policy

DOMAIN = {"name": "arithmetic", "seed": 0, "splits": {"train": 6, "test": 3},
          "levels": {1: {"digits": 2, "operands": 2, "ops": "+"}}}
VERIFY = VerifyConfig(workers=1, timeout_seconds=20.0, max_input_chars=10_000)
DECONTAMINATION = TaskDecontaminationConfig(n=4, threshold=0.5)
CURATE = CurateConfig(seed=0, decontamination=DECONTAMINATION, validation_from_train=1, difficulty={"default": 1})
EVALUATE = EvaluateConfig(seed=0, sampling={"max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0, "batch_size": 8})
LONG_EVAL = "Compute the sum of the two numbers written in the quarterly ledger of the north office"


def interaction(prompt, completion, answer=None, **extra):
    row = {"prompt": prompt, "completion": completion, "domain": "arithmetic", "timestamp": "2026-12-01T10:00:00Z",
           **extra}
    return row if answer is None else {**row, "reference": {"answer": answer, "steps": []}}


def pool_and_eval():
    env = get_domain(DOMAIN)
    tasks = env.generate_tasks()
    evaluation = [t for t in tasks if t.split == "test"] + [
        Task("ledger", "arithmetic", LONG_EVAL, {"answer": "5", "steps": []}, 1, "test", "x")]
    return env, tasks, evaluation


def test_verified_interactions_become_train_tasks_and_the_rest_is_held_back_with_its_reason():
    env, pool, evaluation = pool_and_eval()
    rows = [
        interaction("Compute 41+17", "\\boxed{58}", "58", outcome=True),
        interaction("Compute 30+12", "\\boxed{41}", "42", outcome=True, feedback="thumbs up"),  # log and verifier disagree
        interaction("Compute 2+2", "4"),  # no reference: never trains
        interaction("Compute 3+3", "6", "6", domain="chess"),  # no such domain here
        {"prompt": "Compute 1+1", "domain": "arithmetic", "timestamp": 1},  # no completion
        interaction("Compute 9+9", "18", "18", outcome=7),  # outcome out of range
        "not an object",
        interaction(pool[0].prompt, "x", "1"),  # already a task of the pool
        interaction(LONG_EVAL.replace("north", "south"), "5", "5"),  # an evaluation prompt, one word changed
    ]
    result = ingest(rows, pool, evaluation, env, VERIFY, DECONTAMINATION)
    assert [t.prompt for t in result.tasks] == ["Compute 41+17"]
    assert all(t.source == SOURCE and t.split == "train" for t in result.tasks)
    assert result.tasks[0].task_id == task_id("arithmetic", "Compute 41+17")
    stages = [h["stage"] for h in result.held_back]
    assert stages.count("unverifiable") == 2 and stages.count("malformed") == 3
    assert stages.count("duplicate") == 1 and stages.count("contaminated") == 1 and stages.count("refuted") == 1
    assert all(h["reason"] for h in result.held_back)
    assert result.counts["logged_completions_correct"] == 1 and result.counts["outcome_disagreements"] == 1
    assert result.counts["interactions"] == len(rows) == len(result.tasks) + len(result.held_back)


def test_reingesting_the_same_log_adds_nothing():
    env, pool, evaluation = pool_and_eval()
    rows = [interaction("Compute 41+17", "58", "58")]
    first = ingest(rows, pool, evaluation, env, VERIFY, DECONTAMINATION)
    again = ingest(rows, [*pool, *first.tasks], evaluation, env, VERIFY, DECONTAMINATION)
    assert again.tasks == [] and [h["stage"] for h in again.held_back] == ["duplicate"]


def test_the_regression_set_adds_the_failed_evaluation_tasks_once():
    _, pool, evaluation = pool_and_eval()
    first = regression_set([], evaluation[:3], [True, False, False])
    assert [t.task_id for t in first] == [evaluation[1].task_id, evaluation[2].task_id]
    assert regression_set(first, evaluation[:3], [False, False, True]) == [first[0], first[1], evaluation[0]]
    with pytest.raises(ValueError, match="verdicts"):
        regression_set([], evaluation, [True])


def test_a_jsonl_log_with_a_broken_line_holds_that_line_back(tmp_path):
    log = tmp_path / "interactions.jsonl"
    log.write_text(json.dumps(interaction("Compute 41+17", "58", "58")) + "\n{broken\n\n")
    rows = JSONLinesDataset(str(log)).load()
    assert len(rows) == 2 and "line 2 is not JSON" in rows[1]["_error"]
    assert JSONLinesDataset(str(tmp_path / "absent.jsonl"), missing_ok=True).load() == []
    with pytest.raises(Exception, match="absent"):
        JSONLinesDataset(str(tmp_path / "absent.jsonl")).load()
    env, pool, evaluation = pool_and_eval()
    result = ingest(rows, pool, evaluation, env, VERIFY, DECONTAMINATION)
    assert len(result.tasks) == 1 and "line 2" in result.held_back[0]["reason"]


def test_the_next_curate_picks_up_the_pool_and_evaluate_scores_the_regression_set(tmp_path):
    tasks, _, _ = curate_tasks(DOMAIN, CURATE, VERIFY)
    new_rows = [interaction("Compute 41+17", "58", "58"), interaction("Compute 2+2", "4")]
    pool, held_back, metrics = ingest_interactions(new_rows, [], tasks, [], DOMAIN, VERIFY, CURATE)
    assert metrics["pool"]["value"] == 1 and len(held_back) == 1
    curated, _, curate_metrics = curate_tasks(DOMAIN, CURATE, VERIFY, pool)
    assert curate_metrics["tasks_from_flywheel"]["value"] == 1
    assert (curated["source"] == SOURCE).sum() == 1 and len(curated) == len(tasks) + 1
    test = curated[curated["split"] == "test"].reset_index(drop=True)
    answers = [json.loads(r)["answer"] for r in test["reference"]]
    scripted = next(a for a in answers if len(set(a)) == len(a))
    policy = make_scripted_policy(scripted)  # answers every prompt with one test task's answer
    regression = collect_regression(policy, test, [], DOMAIN, VERIFY, EVALUATE)
    assert {r["task_id"] for r in regression} == {t for t, a in zip(test["task_id"], answers) if a != scripted}
    scored = evaluate_regression(policy, regression, DOMAIN, VERIFY, EVALUATE)
    assert scored["num_tasks"]["value"] == len(regression) and scored["greedy_accuracy"]["value"] == 0.0
    assert evaluate_regression(policy, [], DOMAIN, VERIFY, EVALUATE) == {"num_tasks": {"value": 0.0, "step": 0}}


# red team: rows that slipped past the checks or failed the whole file


def _ingest(rows):
    env, pool, evaluation = pool_and_eval()
    return ingest(rows, pool, evaluation, env, VERIFY, DECONTAMINATION), evaluation


def test_an_evaluation_prompt_hidden_by_invisible_or_look_alike_characters_is_held_back():
    _, _, evaluation = pool_and_eval()
    prompt = evaluation[0].prompt  # "Compute a+b"
    variants = [prompt.replace("pute", "p\u200bute"), prompt.replace("Com", "Co\u200dm"), prompt.replace("+", "\u2060+"),
                "\ufeff" + prompt, prompt.replace("ute", "u\u00adte"), prompt.replace("o", "о"),  # Cyrillic o
                prompt.translate({ord(c): ord(c) + 0xFEE0 for c in "0123456789+"})]  # full-width digits and plus
    result, _ = _ingest([interaction(v, "1", evaluation[0].reference["answer"]) for v in variants])
    assert result.tasks == [] and len(result.held_back) == len(variants)
    assert {h["stage"] for h in result.held_back} <= {"duplicate", "contaminated"}


def test_a_short_paraphrase_of_an_evaluation_prompt_is_contaminated():
    rows = [interaction("What is 17 times 23?", "391", "391"), interaction("Compute seventeen times twenty-three.", "391", "391")]
    env, pool, evaluation = pool_and_eval()
    evaluation = [*evaluation, Task("product", "arithmetic", "Compute 17*23", {"answer": "391", "steps": []}, 1, "test", "x")]
    result = ingest(rows, pool, evaluation, env, VERIFY, DECONTAMINATION)
    assert result.tasks == [] and [h["stage"] for h in result.held_back] == ["contaminated", "contaminated"]
    assert all("product" in h["reason"] for h in result.held_back)


def test_a_prompt_over_the_size_limit_is_held_back():
    result, _ = _ingest([interaction("Compute 1+2 " + "please " * 3000, "3", "3"), interaction("Compute 40+2", "42", "42")])
    assert [t.prompt for t in result.tasks] == ["Compute 40+2"]
    assert result.held_back[0]["stage"] == "malformed" and "more than 16000" in result.held_back[0]["reason"]


def test_a_reference_the_verifier_refutes_or_cannot_check_is_held_back():
    rows = [interaction("Compute 2+2", "\\boxed{5}", "2+2=5"),  # an equation whose sides differ is no answer
            interaction("Compute 1+2", "\\boxed{3}", "{"),  # a brace the boxed answer cannot hold
            interaction("Compute 9+9", "18", "9" * 30_000),  # longer than the verifier reads
            interaction("Compute 3+4", "\\boxed{7}", "7", outcome=False),  # the log says wrong, the verifier right
            interaction("Compute 40+2", "\\boxed{42}", "42", outcome=True)]
    result, _ = _ingest(rows)
    assert [t.prompt for t in result.tasks] == ["Compute 40+2"]
    assert [h["stage"] for h in result.held_back] == ["refuted", "refuted", "unverifiable", "refuted"]
    assert "scores wrong against it" in result.held_back[0]["reason"] and "log says" in result.held_back[3]["reason"]
    assert result.counts["held_back.refuted"] == 3 and result.counts["outcome_disagreements"] == 1


BAD_LINES = {
    "deep_nesting": b"[" * 100_000 + b"]" * 100_000,
    "deep_object": b'{"prompt": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    "a_float_overflowing": b'{"prompt": "Compute 1+1", "completion": "2", "domain": "arithmetic", "timestamp": 1e999999}',
    "a_100000_digit_integer": b'{"prompt": "Compute 1+1", "timestamp": ' + b"9" * 100_000 + b"}",
    "nan_literal": b'{"prompt": "Compute 1+1", "completion": "2", "domain": "arithmetic", "timestamp": NaN}',
    "infinity_literal": b'{"prompt": "Compute 1+1", "completion": "2", "domain": "arithmetic", "outcome": -Infinity}',
    "invalid_utf8": b'{"prompt": "Compute \xff\xfe", "completion": "2"}',
    "a_byte_order_mark": "\ufeff".encode() + json.dumps(interaction("Compute 5+5", "10", "10")).encode(),
    "a_line_separator_outside_strings": b'{"prompt": "Compute 1+1",\xe2\x80\xa8 "completion": "2"}',
    "binary": bytes(b for b in range(256) if b != 10),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_one_malformed_line_of_any_kind_is_one_held_back_row_and_the_rest_is_ingested(kind):
    good = [interaction("Compute 40+2", "42", "42"), interaction("Compute 3\u2028+4", "7", "7")]  # raw U+2028 in a string
    data = json.dumps(good[0]).encode() + b"\n" + BAD_LINES[kind] + b"\r\n" + json.dumps(good[1], ensure_ascii=False).encode()
    rows = read_json_lines(data)
    assert len(rows) == 3 and "_error" in rows[1]
    result, _ = _ingest(rows)
    assert [t.prompt for t in result.tasks] == ["Compute 40+2", "Compute 3\u2028+4"]
    assert [h["stage"] for h in result.held_back] == ["malformed"] and "line 2" in result.held_back[0]["reason"]


def test_a_row_holding_anything_is_one_held_back_row():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    rows = [deep, {"prompt": 10**5000, "completion": "2", "domain": "arithmetic", "timestamp": 1},
            {**interaction("Compute 1+1", "2", "2"), "timestamp": float("nan")},
            {**interaction("Compute 1+2", "3", "3"), "outcome": float("inf")},
            {**interaction("Compute 1+3", "4", "4"), "feedback": 10**5000},  # kept as it is: feedback is anything
            interaction("Compute 1+4", "5", [5]), interaction("Compute 1+5", "6", None) | {"reference": [["6"]]}]
    result, _ = _ingest(rows)
    assert [t.prompt for t in result.tasks] == ["Compute 1+3"]
    assert [h["stage"] for h in result.held_back] == ["malformed"] * 4 + ["unverifiable"] * 2
    assert all(isinstance(h["row"], str) and h["reason"] for h in result.held_back)
