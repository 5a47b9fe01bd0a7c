"""`kedro run --pipeline=rlvr --env textarena` at a tiny size: a TextArena game through curation, SFT on the
expert's episodes, RL rounds in scheduler workers, and evaluation."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_tables, run_pipeline

pytest.importorskip("textarena", reason="TextArena is not installed: pip install -e '.[textarena]'")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def textarena_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("textarena_run"))
    runtime = copy.deepcopy(TINY_PARAMS)
    runtime["domain"] = {"splits": {"train": 30, "validation": 4, "test": 6}}
    runtime["model"]["embedded"]["corpus_size"] = 40
    runtime["sft"]["num_examples"] = 20
    run_pipeline(project, runtime, env="textarena")
    return project


def test_every_seed_is_a_task_though_the_games_share_their_first_observation(textarena_run):
    tasks = pd.read_parquet(textarena_run / "data/envs/textarena/03_primary/tasks.parquet")
    assert tasks.groupby("split").size().to_dict() == {"test": 6, "train": 30, "validation": 4}
    assert tasks["prompt"].nunique() == 1  # GuessTheNumber hides its number
    assert tasks["reference"].map(lambda r: json.loads(r)["seed"]).nunique() == 40


def test_rounds_play_multi_turn_games_scored_by_the_game(textarena_run):
    scored = round_tables(textarena_run / "data/envs/textarena/07_model_output/scored")
    assert set(scored["round"]) == {0, 1} and set(scored["status"]) == {"ok"}
    assert all("env_reward" in b or "unfinished" in b for b in scored["reward_breakdown"])
    report = json.loads((textarena_run / "data/envs/textarena/08_reporting/metrics.json").read_text())
    assert 0.0 <= report["rl"]["greedy_accuracy"] <= 1.0
