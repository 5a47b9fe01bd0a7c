"""Pair curation: bad pairs go to quarantine with the reason; duplicates and contaminated train pairs are removed."""

import math

import pytest

from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.preferences import PAIR_QUARANTINE_COLUMNS, curate_pairs, pair_quarantine_frame
from rlvr_factory.preferences.curation import validate_pair_row
from rlvr_factory.training.sft import encode_chat_examples
from rlvr_factory.domains.curation import DecontaminationConfig

DECON = DecontaminationConfig(n=4, threshold=0.5)


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


# -- red team: numbers, invisible differences and contradictions are refused with a reason, never kept or crashed on --

@pytest.mark.parametrize("margin", [
    float("nan"), float("inf"), float("-inf"), "NaN", "Infinity", "-Infinity", "nan", "1.5",
    True, False, 10**400, -1.0, 1e300, __import__("numpy").float64("nan"), __import__("numpy").bool_(True),
])
def test_a_margin_that_is_not_a_finite_non_negative_number_is_refused_with_the_reason(margin):
    pair, why = validate_pair_row(row("a", margin=margin))
    assert pair is None and why.startswith("margin:"), why


def test_a_margin_left_out_or_null_is_no_margin_and_a_number_is_kept():
    assert math.isnan(validate_pair_row(row("a"))[0].margin)
    assert math.isnan(validate_pair_row(row("a", margin=None))[0].margin)
    assert validate_pair_row(row("a", margin=2))[0].margin == 2.0


@pytest.mark.parametrize("chosen,rejected", [
    ("The answer is 5", "the answer is 5"),  # case
    ("The answer is 5", "The  answer\tis\n5"),  # whitespace inside
    ("The answer is 5", "The ans\u200bwer is 5"),  # a zero-width space
    ("The answer is 5", "\ufeffThe answer is 5\u2060"),  # BOM and word joiner
    ("The answer is 5", "\uff34\uff48\uff45 answer is \uff15"),  # fullwidth letters and digit (NFKC)
    ("The answer is 5", "THE ANSWER\u00a0IS 5\u200d"),  # no-break space, zero-width joiner
    ("The answer is 5", "The answer is 5\u3164"),  # a Hangul filler
])
def test_chosen_and_rejected_identical_as_a_reader_sees_them_are_refused(chosen, rejected):
    pair, why = validate_pair_row(row("a", chosen=chosen, rejected=rejected))
    assert pair is None and why.startswith("chosen and rejected are identical"), why


def test_a_field_of_invisible_characters_only_is_empty():
    pair, why = validate_pair_row(row("a", rejected="\u200b\u200d \ufeff"))
    assert pair is None and why.startswith("rejected: empty")


@pytest.mark.parametrize("bad", [None, ["prompt", "chosen"], "a pair", 3])
def test_a_row_that_is_not_an_object_is_quarantined_not_a_crash(bad):
    result = curate_pairs([bad, row("ok")], [], decontamination=DECON, validation_from_train=0, seed=0)
    assert [p.pair_id for p in result.pairs] == ["ok"]
    assert result.quarantined[0]["reason"].startswith("a pair row must be an object")


def test_a_pair_and_its_reverse_are_both_removed_naming_each_other():
    rows = [row("forward", chosen="good", rejected="bad"), row("reverse", chosen="Bad", rejected="go\u200bod "),
            row("other", prompt="Compute 7*8", chosen="56", rejected="54")]
    result = curate_pairs(rows, [], decontamination=DECON, validation_from_train=0, seed=0)
    assert [p.pair_id for p in result.pairs] == ["other"]
    reasons = {r["pair_id"]: (r["stage"], r["reason"]) for r in result.quarantined}
    assert reasons["forward"][0] == reasons["reverse"][0] == "contradiction"
    assert reasons["forward"][1].startswith("pair 'reverse' prefers the rejected completion")
    assert reasons["reverse"][1].startswith("pair 'forward' prefers the rejected completion")
    assert result.counts["removed.contradiction"] == 2


def test_a_reverse_pair_across_splits_and_a_repeated_one_are_all_removed():
    rows = [row("t1", chosen="good", rejected="bad"), row("t2", chosen="good", rejected="bad"),
            row("v", chosen="bad", rejected="good", split="validation")]
    result = curate_pairs(rows, [], decontamination=DECON, validation_from_train=0, seed=0)
    assert result.pairs == [] and {r["stage"] for r in result.quarantined} == {"contradiction"}


def test_invisible_characters_hide_neither_a_duplicate_nor_an_evaluation_prompt():
    rows = [row("first"), row("copy", prompt="Com\u200bpute 2+\ufeff3", chosen="2+3=5\n\\boxed{5}\u2060"),
            row("leak", prompt="What is the capi\u200btal of\u00a0France?", chosen="Paris", rejected="Rome")]
    result = curate_pairs(rows, ["What is the capital of France?"], decontamination=DECON, validation_from_train=0,
                          seed=0)
    assert [p.pair_id for p in result.pairs] == ["first"]
    assert {r["pair_id"]: r["stage"] for r in result.quarantined} == {"copy": "deduplicate", "leak": "decontaminate"}


def test_json_lines_with_nan_infinity_and_boolean_margins_become_quarantine_rows(tmp_path):
    from rlvr_factory.preferences import loaded_rows

    lines = ['{"prompt": "Compute 1+1", "chosen": "2", "rejected": "3", "margin": NaN}',
             '{"prompt": "Compute 1+2", "chosen": "3", "rejected": "4", "margin": Infinity}',
             '{"prompt": "Compute 1+3", "chosen": "4", "rejected": "5", "margin": -Infinity}',
             '{"prompt": "Compute 1+4", "chosen": "5", "rejected": "6", "margin": true}',
             '{"prompt": "Compute 1+5", "chosen": "6", "rejected": "7", "margin": "NaN"}',
             '{"prompt": "Compute 1+6", "chosen": "7", "rejected": "8", "score_chosen": NaN, "score_rejected": 1}',
             '{"prompt": "Compute 1+7", "chosen": "8", "rejected": "9", "margin": 1.5}',
             '{"prompt": "Compute 1+8", "chosen": "9", "rejected": "10"}']
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    result = curate_pairs(loaded_rows({"train": str(tmp_path / "pairs.jsonl")}), [], decontamination=DECON,
                          validation_from_train=0, seed=0)
    assert [(p.prompt, p.margin) for p in result.pairs[:1]] == [("Compute 1+7", 1.5)]
    assert [p.prompt for p in result.pairs] == ["Compute 1+7", "Compute 1+8"] and math.isnan(result.pairs[1].margin)
    assert len(result.quarantined) == 6
    assert all("expected a finite number" in r["reason"] for r in result.quarantined), result.quarantined
