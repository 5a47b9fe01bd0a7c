"""Preference records in the common formats map to one contract: prompt, chosen, rejected, margin."""

import json

import pandas as pd
import pytest

from rlvr_factory.preferences import loaded_rows, record_to_pair
from rlvr_factory.preferences.formats import detect_format


def test_native_rows_keep_their_fields_and_margin():
    row = record_to_pair({"prompt": "Say hi", "chosen": "Hi!", "rejected": "No.", "margin": 2, "kind": "rude"})
    assert row == {"prompt": "Say hi", "chosen": "Hi!", "rejected": "No.", "margin": 2.0, "kind": "rude"}
    assert record_to_pair({"prompt": "a", "chosen": "b", "rejected": "c"})["margin"] is None  # not given


def test_ultrafeedback_binarized_rows_strip_the_prompt_turn_and_take_the_score_gap():
    record = {
        "prompt": "What is 2+2?", "prompt_id": "x",
        "chosen": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}],
        "rejected": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "5"}],
        "score_chosen": 8.5, "score_rejected": 3.0,
    }
    assert detect_format(record) == "conversational"
    assert record_to_pair(record) == {"prompt": "What is 2+2?", "chosen": "4", "rejected": "5", "margin": 5.5}


def test_trl_conversational_rows_with_a_message_prompt_or_none():
    with_prompt = {"prompt": [{"role": "user", "content": "Hi"}],
                   "chosen": [{"role": "assistant", "content": "Hello"}],
                   "rejected": [{"role": "assistant", "content": "Go away"}]}
    row = record_to_pair(with_prompt)
    assert (row["prompt"], row["chosen"], row["rejected"]) == ("Hi", "Hello", "Go away") and row["margin"] is None
    implicit = {"chosen": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                           {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "good"}],
                "rejected": [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
                             {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "bad"}]}
    row = record_to_pair(implicit)
    assert row["prompt"] == "User: Q1\n\nAssistant: A1\n\nUser: Q2"
    assert (row["chosen"], row["rejected"]) == ("good", "bad")


def test_raw_ultrafeedback_takes_the_best_and_worst_rated_completions():
    record = {"instruction": "Write a haiku", "completions": [
        {"response": "meh", "overall_score": 4}, {"response": "best", "overall_score": 9},
        {"response": "worst", "overall_score": 2}]}
    assert record_to_pair(record) == {"prompt": "Write a haiku", "chosen": "best", "rejected": "worst", "margin": 7.0}
    tied = {"instruction": "x", "completions": [{"response": "a", "overall_score": 5}, {"response": "b", "overall_score": 5}]}
    with pytest.raises(ValueError, match="no preference"):
        record_to_pair(tied)


def test_hh_rlhf_transcripts_split_at_the_last_assistant_turn():
    single = {"chosen": "\n\nHuman: How do I boil an egg?\n\nAssistant: Put it in boiling water for 8 minutes.",
              "rejected": "\n\nHuman: How do I boil an egg?\n\nAssistant: I won't help."}
    row = record_to_pair(single)
    assert (row["prompt"], row["chosen"], row["rejected"]) == (
        "How do I boil an egg?", "Put it in boiling water for 8 minutes.", "I won't help.")
    multi = {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello\n\nHuman: Joke?\n\nAssistant: Knock knock.",
             "rejected": "\n\nHuman: Hi\n\nAssistant: Hello\n\nHuman: Joke?\n\nAssistant: No."}
    assert record_to_pair(multi)["prompt"] == "Human: Hi\n\nAssistant: Hello\n\nHuman: Joke?"


@pytest.mark.parametrize("record,match", [
    ({"question": "x"}, "fits no preference format"),
    ({"prompt": "p", "chosen": 3, "rejected": "r"}, "'chosen' must be a string"),
    ({"chosen": [{"role": "assistant"}], "rejected": []}, "list of {role, content} messages"),
    ({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: other\n\nAssistant: c"}, "differ before"),
    ({"prompt": "p", "chosen": "a", "rejected": "b", "margin": "lots"}, "margin: expected a finite number"),
])
def test_records_that_fit_no_format_raise_with_the_reason(record, match):
    with pytest.raises(ValueError, match=match):
        record_to_pair(record)


def test_loaded_rows_keep_unreadable_records_with_the_reason(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n{oops\n"
                    + json.dumps({"prompt": "p"}) + "\n")
    rows = loaded_rows({"train": str(path)})
    assert [r["pair_id"] for r in rows] == ["pairs-train-00000", "pairs-train-00001", "pairs-train-00002"]
    assert rows[0]["chosen"] == "a" and rows[0]["source"].endswith("pairs.jsonl#0")
    assert "line 2 is not JSON" in rows[1]["_error"]
    assert "fits no preference format" in rows[2]["_error"] and json.loads(rows[2]["record"]) == {"prompt": "p"}


def test_ultrafeedback_parquet_and_a_saved_hh_rlhf_dataset_load_as_pairs(tmp_path):
    from datasets import Dataset

    ultrafeedback = [{"prompt": "Name a prime.", "score_chosen": 9.0, "score_rejected": 4.0,
                      "chosen": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}],
                      "rejected": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "8"}]}]
    pd.DataFrame(ultrafeedback).to_parquet(tmp_path / "uf.parquet")
    Dataset.from_list([{"chosen": "\n\nHuman: Hi?\n\nAssistant: Hello!", "rejected": "\n\nHuman: Hi?\n\nAssistant: Go away."}]
                      ).save_to_disk(str(tmp_path / "hh"))
    rows = loaded_rows({"train": str(tmp_path / "uf.parquet"), "validation": str(tmp_path / "hh")})
    by_split = {r["split"]: r for r in rows}
    assert (by_split["train"]["prompt"], by_split["train"]["chosen"], by_split["train"]["rejected"]) == ("Name a prime.", "7", "8")
    assert by_split["train"]["margin"] == 5.0
    assert by_split["validation"]["chosen"].strip() == "Hello!" and by_split["validation"]["rejected"].strip() == "Go away."
    assert "Hi?" in by_split["validation"]["prompt"]


# -- red team: every number a record gives is a finite number, or the record is refused with the reason --

NATIVE = {"prompt": "p", "chosen": "a", "rejected": "b"}
CONVERSATIONAL = {"prompt": "p", "chosen": [{"role": "assistant", "content": "a"}],
                  "rejected": [{"role": "assistant", "content": "b"}]}


@pytest.mark.parametrize("margin", [float("nan"), float("inf"), float("-inf"), "NaN", "Infinity", True, -2])
def test_a_margin_that_is_not_a_finite_non_negative_number_is_refused(margin):
    with pytest.raises(ValueError, match="margin"):
        record_to_pair({**NATIVE, "margin": margin})


@pytest.mark.parametrize("scores,match", [
    ((float("nan"), 1.0), "score_chosen: expected a finite number"),
    ((9.0, float("inf")), "score_rejected: expected a finite number"),
    ((True, 0), "score_chosen: expected a finite number"),
    (("9", 1), "score_chosen: expected a finite number"),
    ((1e308, -1e308), "score_chosen - score_rejected: margin: expected a finite number"),
    ((2.0, 7.0), "score_chosen - score_rejected: margin: -5 lies outside"),  # the scores prefer the rejected one
])
def test_scores_that_are_not_finite_or_prefer_the_rejected_reply_are_refused(scores, match):
    with pytest.raises(ValueError, match=match):
        record_to_pair({**CONVERSATIONAL, "score_chosen": scores[0], "score_rejected": scores[1]})


@pytest.mark.parametrize("rating", [float("nan"), float("inf"), True, "10"])
def test_a_rating_that_is_not_a_finite_number_is_refused_not_sorted(rating):
    record = {"instruction": "Write a haiku", "completions": [
        {"response": "best", "overall_score": 9.0}, {"response": "odd", "overall_score": rating},
        {"response": "worst", "overall_score": 2.0}]}
    with pytest.raises(ValueError, match="completion 1's overall_score: expected a finite number"):
        record_to_pair(record)


@pytest.mark.parametrize("record", [["prompt", "chosen"], "a pair", 3, None])
def test_a_record_that_is_not_an_object_is_refused(record):
    with pytest.raises(ValueError, match="must be an object"):
        record_to_pair(record)


def test_a_record_nested_too_deeply_is_refused_not_a_crash():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        record_to_pair({**NATIVE, "extra": deep})


def test_a_rated_completion_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="completion 1 must be an object"):
        record_to_pair({"instruction": "i", "completions": [{"response": "a", "score": 1}, "b"]})
