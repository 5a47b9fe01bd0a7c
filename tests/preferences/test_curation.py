"""Pair curation: bad pairs go to quarantine with the reason; duplicates and contaminated train pairs are removed."""

import math

import pytest

from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.preferences import PAIR_QUARANTINE_COLUMNS, curate_pairs, pair_quarantine_frame
from rlvr_factory.preferences.curation import validate_pair_row
from rlvr_factory.training.sft import encode_chat_examples

DECON = {"n": 4, "threshold": 0.5}


def row(pair_id, prompt="Compute 2+3", chosen="2+3=5\n\\boxed{5}", rejected="\\boxed{6}", split="train", **extra):
    return {"pair_id": pair_id, "prompt": prompt, "chosen": chosen, "rejected": rejected, "split": split,
            "domain": "arithmetic", "source": "test", **extra}


def count_bytes(prompt: str, completion: str) -> int:
    (p, c), = encode_chat_examples(build_byte_tokenizer(), [prompt], [completion])
    return len(p) + len(c)


@pytest.mark.parametrize("bad,reason", [
    (row("a", chosen="same", rejected="same"), "chosen and rejected are identical"),
    (row("a", chosen="same ", rejected=" same"), "chosen and rejected are identical"),
    (row("a", chosen="   "), "chosen: empty"),
    (row("a", rejected=""), "rejected: empty"),
    (row("a", prompt=""), "prompt: empty"),
    (row("a", chosen=None), "chosen: expected a string"),
    (row("a", split="dev"), "split: 'dev' is not one of"),
    (row("a", margin=float("inf")), "margin: expected a finite number"),
    (row("a", margin="big"), "margin: expected a finite number"),
    (row("a", chosen="x" * 300), "chosen: 3.. tokens with its prompt, longer than the model's context of 256"),
    ({"pair_id": "a", "_error": "line 3 is not JSON"}, "line 3 is not JSON"),
])
def test_a_pair_that_breaks_the_contract_is_refused_with_the_reason(bad, reason):
    pair, why = validate_pair_row(bad, count_bytes, 256)
    assert pair is None
    assert __import__("re").search(reason, why), why


def test_curation_quarantines_bad_pairs_and_keeps_the_good_ones():
    rows = [row("ok-1"), row("same", chosen="x", rejected="x"), row("long", rejected="y" * 400), row("ok-1"),
            row("ok-2", prompt="Compute 7*8", chosen="7*8=56\n\\boxed{56}", margin=1.5)]
    result = curate_pairs(rows, [], decontamination=DECON, validation_from_train=0, seed=0,
                          count_tokens=count_bytes, max_tokens=256)
    assert [p.pair_id for p in result.pairs] == ["ok-1", "ok-2"]
    assert result.pairs[1].margin == 1.5 and math.isnan(result.pairs[0].margin)
    frame = pair_quarantine_frame(result.quarantined)
    assert list(frame.columns) == PAIR_QUARANTINE_COLUMNS
    reasons = dict(zip(frame["pair_id"], frame["reason"]))
    assert reasons["same"].startswith("chosen and rejected are identical")
    assert "longer than the model's context" in reasons["long"]
    assert "appears more than once" in frame[frame["pair_id"] == "ok-1"]["reason"].iloc[0]
    assert result.counts["quarantined.validate"] == 3 and result.counts["pairs"] == 2


def test_of_duplicate_pairs_the_evaluation_copy_is_kept():
    rows = [row("train-copy"), row("val-copy", split="validation"),
            row("near", chosen="2+3=5\n\\BOXED{5}.")]  # case and punctuation differ: still the same pair
    result = curate_pairs(rows, [], decontamination=DECON, validation_from_train=0, seed=0)
    assert [p.pair_id for p in result.pairs] == ["val-copy"]
    assert {r["pair_id"]: r["stage"] for r in result.quarantined} == {"train-copy": "deduplicate", "near": "deduplicate"}


def test_train_pairs_on_evaluation_prompts_are_decontaminated():
    long = "Alice has twelve red apples and gives three of them to her brother Bob"
    rows = [row("exact", prompt="compute 9 + 9"), row("overlap", prompt=long + " today."),
            row("clean", prompt="Compute 1+1"), row("held", prompt="Compute 4+4", split="validation")]
    result = curate_pairs(rows, ["Compute 9+9", long], decontamination=DECON, validation_from_train=0, seed=0)
    assert [p.pair_id for p in result.pairs] == ["clean", "held"]
    reasons = {r["pair_id"]: r["reason"] for r in result.quarantined}
    assert reasons["exact"].startswith("prompt is the evaluation prompt 'Compute 9+9'")
    assert "overlap evaluation task" in reasons["overlap"]


def test_a_train_pair_sharing_a_held_out_pairs_prompt_is_removed():
    rows = [row("train", chosen="a"), row("val", chosen="b", split="validation")]
    result = curate_pairs(rows, [], decontamination=DECON, validation_from_train=0, seed=0)
    assert [p.pair_id for p in result.pairs] == ["val"]


def test_without_held_out_pairs_a_seeded_share_of_train_moves_to_validation():
    rows = [row(f"p{i}", prompt=f"Compute {i}+{i}") for i in range(20)]
    first = curate_pairs(rows, [], decontamination=DECON, validation_from_train=5, seed=3)
    again = curate_pairs(rows, [], decontamination=DECON, validation_from_train=5, seed=3)
    held = [p.pair_id for p in first.pairs if p.split == "validation"]
    assert len(held) == 5 and held == [p.pair_id for p in again.pairs if p.split == "validation"]
    assert first.counts["pairs.train"] == 15
