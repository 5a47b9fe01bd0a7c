"""Round k's name, written and read in one place, and every round's file read back in order."""

import pytest

from rlvr_factory.round_files import each_round, round_name, round_of


@pytest.mark.parametrize("k", [0, 7, 999, 5000])
def test_a_rounds_name_reads_back_as_its_index_from_a_node_a_dataset_or_a_file(k):
    assert round_of(round_name(k)) == k
    assert round_of(f"{round_name(k)}.update") == round_of(f"{round_name(k)}.scored") == k


@pytest.mark.parametrize("name", ["round.rollout", "round.stats", "rounds_001.x", "round_", "round_x.update",
                                  "summarize_rounds", "round_007x.update", "sft_round_001.x"])
def test_other_names_are_no_round(name):
    assert round_of(name) is None


def test_every_round_is_read_in_order_one_at_a_time_and_later_rounds_of_another_run_are_left_alone():
    loaded = []

    def load(k):
        return lambda: loaded.append(k) or k

    partitions = {round_name(k): load(k) for k in (2, 0, 1, 3)}  # round_003: a longer earlier run's
    rounds = each_round(partitions, 3, "stats")
    assert loaded == []  # nothing is read before it is asked for
    assert next(rounds) == 0 and loaded == [0]
    assert list(rounds) == [1, 2] and loaded == [0, 1, 2]


def test_a_missing_round_is_named_before_any_is_read():
    with pytest.raises(FileNotFoundError, match="stats: no round_001 .of rl.rounds=3."):
        each_round({round_name(0): lambda: 0, round_name(2): lambda: 2}, 3, "stats")
