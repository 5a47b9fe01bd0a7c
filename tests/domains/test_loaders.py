"""Loaders read local JSONL (plain and gzipped), Parquet, and Hugging Face datasets through `datasets`."""

import gzip
import json

import pandas as pd
import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.loaders import ERROR_KEY, read_records, resolve

RECORDS = [{"question": "Tom has 2 apples and buys 3. How many now?", "answer": "2+3=<<2+3=5>>5\n#### 5"},
           {"question": "A box holds 4 pens. How many in 2 boxes?", "answer": "4*2=<<4*2=8>>8\n#### 8"}]


def write_jsonl(path, records, opener=open):
    with opener(path, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return path


def test_jsonl_gzipped_jsonl_and_parquet_read_the_same_records(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", RECORDS)
    write_jsonl(tmp_path / "a.jsonl.gz", RECORDS, gzip.open)
    pd.DataFrame(RECORDS).to_parquet(tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.jsonl.gz", "a.parquet"):
        assert read_records(str(tmp_path / name)) == RECORDS


def test_a_line_that_is_not_a_json_object_is_kept_with_the_reason(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(RECORDS[0]) + "\n{broken\n\n[1, 2]\n")
    records = read_records(str(path))
    assert records[0] == RECORDS[0]
    assert records[1][ERROR_KEY].startswith("line 2 is not JSON")
    assert records[2] == {ERROR_KEY: "line 4 is a JSON list, not an object"}


def test_a_saved_hugging_face_dataset_is_read_through_datasets(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the Hugging Face path needs `datasets` (the data extra)")
    datasets.Dataset.from_list(RECORDS).save_to_disk(str(tmp_path / "saved"))
    assert read_records(str(tmp_path / "saved")) == RECORDS
    datasets.DatasetDict({"train": datasets.Dataset.from_list(RECORDS)}).save_to_disk(str(tmp_path / "dict"))
    assert read_records(str(tmp_path / "dict"), split="train") == RECORDS
    with pytest.raises(ValueError, match="say which one with `split`"):
        read_records(str(tmp_path / "dict"))


def test_a_hub_style_id_goes_through_load_dataset_with_its_arguments(tmp_path):
    pytest.importorskip("datasets", reason="the Hugging Face path needs `datasets` (the data extra)")
    write_jsonl(tmp_path / "train.json", RECORDS)  # the `json` builder stands in for a hub id
    assert read_records("json", split="train", data_files=str(tmp_path / "train.json"),
                        cache_dir=str(tmp_path / "hf_cache")) == RECORDS
    domain = get_domain({"name": "gsm8k", "sources": {
        "train": {"path": "json", "split": "train", "data_files": str(tmp_path / "train.json"),
                  "cache_dir": str(tmp_path / "hf_cache")}}})
    assert [t.reference["answer"] for t in domain.generate_tasks()] == ["5", "8"]


def test_a_missing_local_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl does not exist"):
        read_records(str(tmp_path / "nope.jsonl"))


def test_shared_sources_resolve_under_the_shared_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_SHARED_DATA", str(tmp_path))
    assert resolve("shared:gsm8k/test.jsonl") == str(tmp_path / "gsm8k/test.jsonl")
    assert resolve("/abs/x.jsonl") == "/abs/x.jsonl"


def test_a_loaded_domain_limits_each_split_and_names_each_rows_source(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", RECORDS)
    domain = get_domain({"name": "gsm8k", "sources": {"train": str(tmp_path / "train.jsonl")}, "limit": {"train": 1}})
    (row,) = domain.rows()
    assert row["task_id"] == "gsm8k-train-00000" and row["source"].endswith("train.jsonl#0")
    assert row["reference"] == {"answer": "5", "solution": RECORDS[0]["answer"]}


def test_a_line_too_deep_or_with_a_number_too_long_is_one_error_and_the_rest_are_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    lines = ['{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", '{"n": ' + "9" * 5000 + "}", json.dumps({"ok": 1})]
    path.write_text("\n".join(lines) + "\n")
    records = read_records(str(path))
    assert [ERROR_KEY in r for r in records] == [True, True, False] and records[2] == {"ok": 1}


def test_trust_remote_code_is_refused(tmp_path):
    with pytest.raises(ValueError, match="trust_remote_code"):
        read_records(str(tmp_path / "some_dataset"), trust_remote_code=True)
