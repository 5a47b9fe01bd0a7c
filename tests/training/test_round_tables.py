"""The rollouts and scored tables of multi-turn episodes, and the episode metrics of a round."""

import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr_factory.datasets import RoundTableDataset
from rlvr_factory.domains import Task
from rlvr_factory.rollout.episode import Episode, Turn
from rlvr_factory.training.rounds import rollouts_frame, round_metrics, samples_from_scored, scored_frame, verdicts
from rlvr_factory.verifiers.score import Score

TASKS = [Task("a", "arithmetic", "Compute 1+2", {"answer": "3"}, 1, "train", "t"),
         Task("b", "arithmetic", "Compute 2+2", {"answer": "4"}, 2, "train", "t")]


def tool_episode(task_index, sample_index, correct: bool) -> Episode:
    call = Turn("<calc>1+2</calc>", [10, 11, 2], [-0.1, -0.2, -0.3], "stop", "<result>3</result>", [20, 21, 22, 23])
    answer = Turn("\\boxed{3}", [12, 2], [-0.4, -0.5], "stop", reward=0.5)
    return Episode(task_index, sample_index, [1, 2, 3], [call, answer], "done", answer="\\boxed{3}" if correct else "x",
                   info={"tool_calls": 1.0, "tool_errors": 0.0})


def budget_episode(task_index, sample_index) -> Episode:
    call = Turn("<calc>1</calc>", [10, 2], [-0.1, -0.2], "stop")
    return Episode(task_index, sample_index, [1, 2], [call], "max_turns", out_of_budget=True,
                   score=Score(0.0, False, breakdown={"unfinished": 1.0}), info={"tool_calls": 1.0})


def frames(tmp_path):
    episodes = [tool_episode(0, 0, True), budget_episode(0, 1), tool_episode(1, 0, False), budget_episode(1, 1)]
    RoundTableDataset(str(tmp_path / "r.parquet")).save(rollouts_frame(episodes, TASKS, 3, 7))
    rollouts = RoundTableDataset(str(tmp_path / "r.parquet")).load()
    judged = [Score(1.0, True), None, Score(0.0, False), None]
    scores = [j if j is not None else v for j, v in zip(judged, verdicts(rollouts))]
    RoundTableDataset(str(tmp_path / "s.parquet")).save(scored_frame(rollouts, scores))
    return episodes, rollouts, RoundTableDataset(str(tmp_path / "s.parquet")).load()


def test_a_rollouts_row_is_the_whole_trajectory(tmp_path):
    episodes, rollouts, _ = frames(tmp_path)
    row = rollouts.iloc[0]
    assert list(row["completion_ids"]) == [10, 11, 2, 20, 21, 22, 23, 12, 2]
    assert list(row["loss_mask"]) == [1, 1, 1, 0, 0, 0, 0, 1, 1]
    assert list(row["logprobs"]) == pytest.approx([-0.1, -0.2, -0.3, 0, 0, 0, 0, -0.4, -0.5])
    assert row["completion"] == "<calc>1+2</calc><result>3</result>\\boxed{3}"
    assert row["completion_tokens"] == 5 and row["num_turns"] == 2 and row["prompt_tokens"] == 3
    assert [t["reward"] for t in row["turns"]] == [0.0, 0.5]
    assert [t["action_tokens"] for t in row["turns"]] == [3, 2]
    assert row["answer"] == "\\boxed{3}" and pd.isna(row["verdict"])  # judged by the verify station
    assert verdicts(rollouts)[1] == Score(0.0, False, breakdown={"unfinished": 1.0})
    assert (row["round"], row["policy_version"], row["task_id"]) == (3, 7, "a")


def test_the_scored_breakdown_counts_the_episodes_tool_calls(tmp_path):
    _, _, scored = frames(tmp_path)
    assert scored.iloc[0]["reward_breakdown"] == {"tool_calls": 1.0, "tool_errors": 0.0}
    assert scored.iloc[1]["reward_breakdown"] == {"tool_calls": 1.0, "unfinished": 1.0}
    assert list(scored["reward"]) == [1.0, 0.0, 0.0, 0.0] and "verify_ms" not in scored  # timings live in MLflow


def test_samples_carry_the_loss_mask_turns_and_turn_rewards(tmp_path):
    _, _, scored = frames(tmp_path)
    first = samples_from_scored(scored)[0]
    assert first.loss_mask == [1, 1, 1, 0, 0, 0, 0, 1, 1]
    assert first.token_turns == [0] * 7 + [1] * 2 and first.turn_rewards == [0.0, 0.5]


def test_multi_turn_rounds_report_turns_tool_calls_success_by_turns_and_budget_endings(tmp_path):
    _, _, scored = frames(tmp_path)
    metrics = round_metrics(scored, max_turns=3)
    assert metrics["turns_per_episode"] == 1.5
    assert metrics["tool_calls_per_episode"] == 1.0 and metrics["tool_errors_per_episode"] == 0.0
    assert metrics["ended_by_budget_fraction"] == 0.5
    assert metrics["episodes_fraction/turns_1"] == 0.5 and metrics["episodes_fraction/turns_3"] == 0.0
    assert metrics["pass_rate/turns_2"] == 0.5 and metrics["pass_rate/turns_1"] == 0.0
    assert "pass_rate/turns_3" not in metrics  # no episode took three turns
    assert "turns_per_episode" not in round_metrics(scored)  # single-turn runs keep their metrics as they were


def test_on_disk_the_nested_data_are_typed_arrow_columns_not_json_text(tmp_path):
    frames(tmp_path)
    schema = pq.read_schema(tmp_path / "s.parquet")
    assert schema.field("turns").type == pa.list_(pa.struct([
        ("action", pa.string()), ("observation", pa.string()), ("reward", pa.float64()), ("finish_reason", pa.string()),
        ("action_tokens", pa.int64()), ("observation_tokens", pa.int64())]))
    assert schema.field("completion_ids").type == schema.field("loss_mask").type == pa.list_(pa.int64())
    assert schema.field("logprobs").type == pa.list_(pa.float64())
    assert schema.field("reward_breakdown").type.field("numbers").type == pa.map_(pa.string(), pa.float64())
    assert pa.types.is_struct(schema.field("verdict").type)
    strings = [f.name for f in schema if f.type in (pa.string(), pa.large_string())]
    assert sorted(strings) == ["answer", "completion", "domain", "error", "finish_reason", "prompt", "status", "task_id"]


def test_a_breakdown_of_numbers_and_strings_and_a_verdict_come_back_as_they_were(tmp_path):
    # A CAD verdict names why (`cad_status`, `reason`): strings beside the numbers, in one dict.
    cad = Score(0.25, False, "ok", {"iou": 0.25, "cad_status": "built", "reason": "too small", "weight.iou": 1.0},
                "")
    episode = Episode(0, 0, [1], [Turn("cube(1);", [5, 2], [-0.1, -0.2], "stop")], "done", score=cad,
                      info={"builds": 2, "note": "x"})
    path = RoundTableDataset(str(tmp_path / "cad.parquet"))
    rollouts = rollouts_frame([episode], TASKS, 0, 0)
    path.save(rollouts)
    loaded = path.load()
    assert verdicts(loaded) == [cad]
    assert loaded.iloc[0]["info"] == {"builds": 2.0, "note": "x"}
    path.save(scored_frame(loaded, verdicts(loaded)))
    breakdown = path.load().iloc[0]["reward_breakdown"]
    assert breakdown == {"builds": 2.0, "cad_status": "built", "iou": 0.25, "note": "x", "reason": "too small",
                         "weight.iou": 1.0}
    assert list(breakdown) == sorted(breakdown)  # keys sorted, as the JSON text had them
    assert samples_from_scored(path.load())[0].components == {"iou": (0.25, 1.0)}


def test_a_table_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    path = RoundTableDataset(str(tmp_path / "r.parquet"))
    first = rollouts_frame([tool_episode(0, 0, True)], TASKS, 0, 0)
    path.save(first)

    def dies(table, where, **kwargs):
        open(where, "wb").write(b"PAR1 half a table")  # the run killed while it writes
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", dies)
    with pytest.raises(KeyboardInterrupt):
        path.save(rollouts_frame([tool_episode(1, 0, False)], TASKS, 1, 1))
    assert path.load()["task_id"].tolist() == ["a"]  # the last whole table


def test_non_finite_rewards_and_breakdown_values_come_back_as_they_were(tmp_path):
    # A verifier that scores nan or inf is the verifier's bug to report, not the table's to hide or refuse.
    path = RoundTableDataset(str(tmp_path / "r.parquet"))
    verdict = Score(float("nan"), False, "error", {"score": float("inf"), "penalty": float("-inf"), "why": "nan"})
    episode = Episode(0, 0, [1], [Turn("x", [5], [float("-inf")], "stop", reward=float("nan"))], "done", score=verdict)
    path.save(rollouts_frame([episode], TASKS, 0, 0))
    row = path.load().iloc[0]
    (loaded,) = verdicts(path.load())
    assert math.isnan(loaded.reward) and loaded.breakdown == {"penalty": float("-inf"), "score": float("inf"), "why": "nan"}
    assert math.isnan(row["turns"][0]["reward"]) and list(row["logprobs"]) == [float("-inf")]


def test_numpy_numbers_in_a_breakdown_are_numbers_not_labels():
    # A scorer that returns numpy values (np.int64 counts, np.float32 scores, np.bool_ flags) gets numbers back,
    # not their text: `split_mixed` keyed on Python's int and float stored np.int64(3) as the label "3".
    import numpy as np

    from rlvr_factory.training.round_batch import join_mixed, split_mixed

    stored = split_mixed({"count": np.int64(3), "score": np.float32(0.5), "ok": np.bool_(True), "why": "x"})
    assert stored == {"numbers": {"count": 3.0, "score": 0.5, "ok": 1.0}, "labels": {"why": "x"}}
    assert join_mixed(stored) == {"count": 3.0, "ok": 1.0, "score": 0.5, "why": "x"}
