"""TextArena's games through the gym-style adapter (domains/gym_text.py): seeded tasks, episodes scored by the
game, episodes that repeat exactly and leave nothing behind, third-party code kept out of the rollout's process."""

from __future__ import annotations

import json
import pickle
import random
import time

import numpy as np
import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.base import Task
from rlvr_factory.domains.curation import curate
from rlvr_factory.domains.gym_text import GameDomain, Transition, outcome
from rlvr_factory.domains.textarena import TextArenaDomain, guess_the_number
from rlvr_factory.parameters import TaskDecontaminationConfig
from rlvr_factory.rollout.steps import Executor, ExecutorConfig, Failed

pytest.importorskip("textarena", reason="TextArena is not installed: pip install -e '.[textarena]'")
EXPERT = "rlvr_factory.domains.textarena:guess_the_number"


@pytest.fixture(scope="module")
def domain():
    return get_domain({"name": "textarena", "splits": {"train": 6, "test": 4}, "expert": EXPERT})


@pytest.fixture(scope="module")
def tasks(domain):
    return domain.generate_tasks()


def episode(domain, task, actions):
    env = domain.environment()
    seen = [env.reset(task)]
    for action in actions:
        step = env.step(action)
        seen.append(step)
        if step.done:
            break
    return seen


def test_tasks_are_distinct_seeds_whose_prompt_is_the_games_first_observation(domain, tasks):
    assert [t.split for t in tasks] == ["train"] * 6 + ["test"] * 4
    assert len({t.reference["seed"] for t in tasks}) == 10
    assert tasks[0].prompt.startswith("You are Player 0. You are playing Guess The Number")
    assert tasks[0].prompt == episode(domain, tasks[0], [])[0]
    assert [t.reference for t in TextArenaDomain(splits={"train": 6, "test": 4}).generate_tasks()] == [
        t.reference for t in tasks]


def test_the_experts_episode_wins_and_the_game_scores_it(domain, tasks):
    for task in tasks[:3]:
        actions = domain.tool_demonstration(task)[::2]
        last = episode(domain, task, actions)[-1]
        assert last.done and last.score.correct and last.score.reward == 1.0
        assert last.score.breakdown["env_reward"] == 1.0


def test_a_wrong_guess_is_answered_and_an_unplayable_one_ends_unrewarded(domain, tasks):
    seen = episode(domain, tasks[0], ["[21]", "[1]"])
    assert "invalid move" in seen[1].observation.lower() and not seen[1].done
    assert "[21]" not in seen[1].observation  # the model's own move is not echoed back
    seen = episode(domain, tasks[0], ["hello"] * 5)
    assert seen[-1].done and seen[-1].score.reward == 0.0 and not seen[-1].score.correct


def test_an_episode_repeats_exactly_whatever_ran_beside_it_and_leaves_the_generators_alone(domain, tasks):
    alone = [s if isinstance(s, str) else (s.observation, s.score) for s in episode(domain, tasks[1], ["[10]", "[5]", "[15]"])]
    random.seed(123)
    np.random.seed(123)
    before = random.random(), np.random.random()
    random.seed(123)
    np.random.seed(123)
    a, b = domain.environment(), domain.environment()
    interleaved = [a.reset(tasks[1])]
    b.reset(tasks[2])
    for action in ["[10]", "[5]", "[15]"]:
        b.step("[3]")
        step = a.step(action)
        interleaved.append((step.observation, step.score))
        if step.done:
            break
    assert interleaved == alone
    assert (random.random(), np.random.random()) == before  # the game's reseeding did not reach the caller


def test_an_environment_pickles_mid_episode_and_goes_on(domain, tasks):
    env = domain.environment()
    env.reset(tasks[0])
    env.step("[10]")
    copy = pickle.loads(pickle.dumps(env))
    assert copy.step("[5]") == env.step("[5]")


def test_the_game_is_refused_in_the_rollouts_own_process(domain, tasks):
    with Executor(ExecutorConfig()) as inline, pytest.raises(ValueError, match="executor: scheduler"):
        inline.run("reset", [domain.environment()], [tasks[0]])


def test_in_scheduler_workers_a_hanging_game_is_cut_at_the_limit(domain, tasks):
    config = ExecutorConfig(executor="scheduler", workers=1, timeout_seconds=5.0)
    hanging = HangingDomain({"train": 1}, 0, 1.0, None, 3, 1, 10.0)
    with Executor(config) as executor:
        (env, first), (stuck, _) = executor.run("reset", [domain.environment(), hanging.environment()],
                                                [tasks[0], Task("h", "hang", "", {"seed": 1}, 1, "train", "")])
        assert first == tasks[0].prompt
        start = time.perf_counter()
        ((_, step), (_, failed)) = executor.run("step", [env, stuck], ["[10]", "[10]"])
        assert not step.done and step.observation
        assert isinstance(failed, Failed) and failed.status == "timeout"
        assert time.perf_counter() - start < 30


def test_a_non_finite_or_missing_final_reward_is_an_error_never_a_reward():
    for reward in (float("nan"), float("inf"), None, "1"):
        score = outcome(reward, 1.0)
        assert score.status == "error" and score.reward == 0.0 and not score.correct
    assert outcome(0.5, 1.0).reward == 0.5 and not outcome(0.5, 1.0).correct and outcome(1, 1.0).correct


def test_curation_keeps_every_seed_though_they_share_their_prompt_and_drops_a_repeated_seed(domain, tasks):
    rows = [t.to_row() for t in tasks] + [{**tasks[0].to_row(), "task_id": "textarena-train-copy"}]
    curated = curate(rows, domain, decontamination=TaskDecontaminationConfig(), validation_from_train=0,
                     default_difficulty=1, seed=0)
    assert sorted(t.task_id for t in curated.tasks) == sorted(t.task_id for t in tasks)
    assert [q["task_id"] for q in curated.quarantined] == ["textarena-train-copy"]


def test_the_replay_verifier_does_not_pay_junk_and_an_unknown_game_is_refused_naming_some(domain, tasks):
    for junk in ("", "[1] [2] [3] [4] [5] [6] [7] [8] [9] [10]", "\\boxed{7}", "x" * 10_000):
        assert not domain.score(junk, tasks[0].reference).correct
    with pytest.raises(ValueError, match=r"no game 'Nope-v0'; e.g. \['2048-v0'.*\(\d+ in all\)"):
        get_domain({"name": "textarena", "env_id": "Nope-v0"})


def test_the_corpus_is_expert_games_on_seeds_no_task_uses(domain, tasks):
    corpus = domain.pretraining_corpus(3, 0, set())
    assert len(corpus) == 3 and all(doc.startswith("You are Player 0") and "[10]" in doc for doc in corpus)
    assert guess_the_number(["between 1 and 20"], []) == "[10]"
    assert guess_the_number(["between 1 and 20", "higher"], ["[10]"]) == "[15]"


class HangingGame:
    def reset(self, seed: int) -> str:
        return "go"

    def step(self, action: str) -> Transition:
        time.sleep(3600)
        return Transition("", 0.0, True)


class HangingDomain(GameDomain):
    name = "hang"

    def make_game(self, reference):
        return HangingGame()


def test_the_tasks_of_a_game_that_will_not_reset_are_quarantined_with_the_reason():
    rows = BrokenDomain({"train": 2}, 0, 1.0, None, 3, 1, 10.0).rows()
    assert len(rows) == 2 and all("reset failed (error)" in r["_error"] and "no board" in r["_error"] for r in rows)
    assert json.loads(rows[0]["reference"])["seed"] >= 0


class BrokenGame(HangingGame):
    def reset(self, seed: int) -> str:
        raise RuntimeError("no board")


class BrokenDomain(GameDomain):
    name = "broken"

    def make_game(self, reference):
        return BrokenGame()


def test_a_two_player_game_is_played_against_a_seeded_scripted_opponent():
    domain = get_domain({"name": "textarena", "env_id": "TicTacToe-v0", "num_players": 2,
                         "opponent": "rlvr_factory.domains.textarena:random_move", "splits": {"train": 3}})
    task = domain.generate_tasks()[0]
    moves = ["[4]", "[0]", "[8]", "[2]", "[6]", "[1]", "[3]", "[5]", "[7]"]

    def game():
        env, seen = domain.environment(), []
        env.reset(task)
        for move in moves:
            step = env.step(move)
            seen.append((step.observation, step.score))
            if step.done:
                return seen
        return seen

    first = game()
    assert first == game()  # the opponent's draws are the episode's own
    assert "[Player 1]" in first[0][0] and "Available Moves" in first[0][0]
    assert first[-1][1] is not None and first[-1][1].reward in (-1.0, 0.0, 1.0)
    assert first[-1][1].correct == (first[-1][1].reward == 1.0)
    with pytest.raises(ValueError, match="needs an opponent"):
        get_domain({"name": "textarena", "env_id": "TicTacToe-v0", "num_players": 2})


def test_a_turn_reward_that_is_no_finite_number_ends_the_episode_as_an_error():
    from rlvr_factory.domains.gym_text import GameEnvironment

    for reward in (float("nan"), None, float("-inf")):
        env = GameEnvironment(lambda reference, r=reward: ScriptedGame(r), 1.0)
        env.reset(Task("t", "g", "", {"seed": 1}, 1, "train", ""))
        step = env.step("move")
        assert step.done and step.score.status == "error" and step.score.reward == 0.0


class ScriptedGame:
    def __init__(self, reward):
        self.reward = reward

    def reset(self, seed):
        return "go"

    def step(self, action):
        return Transition("again", self.reward, False)


def test_the_audit_lets_a_game_pay_a_chance_win_but_fails_a_move_that_wins_most_games(domain):
    from rlvr_factory.audit import AuditConfig, audit
    from rlvr_factory.verifiers.score import Score
    from rlvr_factory.verification import VerifyConfig

    tasks = [Task(f"textarena-train-{i}", "textarena", "Guess from 1 to 20, e.g. [5].", {"seed": i}, 1, "train", "")
             for i in range(4)]

    def judge(pays):
        return lambda d, completions, references, verify: (
            [Score(1.0, True) if pays(c, r) else Score(0.0, False) for c, r in zip(completions, references)], {})

    lucky = audit(domain, tasks, VerifyConfig(), AuditConfig(), judge(lambda c, r: "[5]" in c and r["seed"] == 0))
    assert not lucky.failing and sum(lucky.groups["textarena"].paid.values()) > 0
    universal = audit(domain, tasks, VerifyConfig(), AuditConfig(), judge(lambda c, r: "[5]" in c and r["seed"] < 3))
    assert "echo" in universal.failing["textarena"] and "beyond a chance win" in universal.failing["textarena"]
