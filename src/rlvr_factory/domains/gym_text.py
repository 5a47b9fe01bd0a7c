"""Gym-style text environments from other packages (TextArena, SkyRL-Gym) as our multi-turn environments.

Each package's environments speak a variant of one protocol: reset with a seed (or a task row),
then step with the model's text until done, with rewards along the way. A `Game` adapter turns
one package's variant into `reset(seed) -> observation` and `step(action) -> Transition`;
`GameEnvironment` runs a game as our `Environment`:

- every episode builds a fresh game (no object of the package is reused across episodes) and owns
  the process's global random generators (`random`, `numpy.random`) during its calls: they are
  seeded from the task at `reset` and saved and restored around each call, so an episode repeats
  exactly whatever other episodes ran in the same worker in between (TextArena reseeds `random`
  at reset and draws from it while playing);
- the rewards of steps before the last are the turns' own rewards (`Step.reward`); the last
  step's reward is the episode's outcome (`Score.reward`), correct when it reaches the domain's
  `success_reward`; a non-finite reward is an `error` verdict, never a reward;
- the package's code is third-party code: `GameEnvironment.untrusted` makes the rollout refuse
  to run it in the rollout's own process (`rollout.environment.executor: scheduler` runs it in
  worker processes, each call under a time limit), and `GameDomain` runs the resets that make
  task prompts and the expert's demonstrations in a separate process.

`GameDomain` is the domain half: tasks are seeds (or rows), split by seed, so a task's prompt is
the game's first observation and two tasks may share it (GuessTheNumber hides its number): curation
tells them apart by `task_key`. An `expert` (a `module:function` from the episode so far to the next
action) plays demonstration episodes for SFT and the base model's corpus.
"""

from __future__ import annotations

import importlib
import json
import math
import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from rlvr_factory.domains.base import AnswerForm, Step, Task
from rlvr_factory.scheduler import create_scheduler
from rlvr_factory.verifiers.score import Score

Expert = Callable[[Sequence[str], Sequence[str]], str]  # (observations so far, actions so far) -> next action
SEED_SPACE = 2**31  # task seeds are drawn below this; the base model's corpus plays seeds above it
UNFINISHED = Score(0.0, False, breakdown={"unfinished": 1.0})


@dataclass(frozen=True)
class Transition:
    """One step of a game: what the player sees next, the step's reward, and whether the game ended."""

    observation: str
    reward: float
    done: bool
    info: Mapping[str, str] | None = None  # why the game ended, as the package says it


class Game(Protocol):
    """One package's environment behind two calls; a fresh game is made for every episode."""

    def reset(self, seed: int) -> str:
        """Start the game seeded with `seed`; the first observation."""

    def step(self, action: str) -> Transition:
        """Play the model's action."""


GameFactory = Callable[[Mapping[str, Any]], Game]  # a task's reference -> a fresh game


@contextmanager
def own_random(state: tuple[Any, Any]) -> Iterator[list[tuple[Any, Any]]]:
    """Run a block with the global generators set to `state` (random's, numpy's); yields a list that holds
    their state after the block. The caller's state is restored either way."""
    saved = random.getstate(), np.random.get_state()
    random.setstate(state[0])
    np.random.set_state(state[1])
    after: list[tuple[Any, Any]] = []
    try:
        yield after
    finally:
        after.append((random.getstate(), np.random.get_state()))
        random.setstate(saved[0])
        np.random.set_state(saved[1])


def seeded_state(seed: int) -> tuple[Any, Any]:
    """The generators' state after seeding both with `seed`, without touching the process's own."""
    return random.Random(seed).getstate(), np.random.RandomState(seed % 2**32).get_state(legacy=True)


def finite_number(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) and finite."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def outcome(reward: Any, success_reward: float, info: Mapping[str, str] | None = None) -> Score:
    """The verdict of a game's final reward: correct when it reaches `success_reward`; a reward that is not a
    finite number (a game that ended unscored) is an `error` verdict with reward 0."""
    if not finite_number(reward):
        return Score(0.0, False, status="error", breakdown={"env_reward": 0.0},
                     message=f"the environment ended the game with reward {reward!r}, not a finite number")
    breakdown: dict[str, float | str] = {"env_reward": float(reward)}
    if info and "reason" in info:
        breakdown["reason"] = str(info["reason"])[:200]
    return Score(float(reward), float(reward) >= success_reward, breakdown=breakdown)


class GameEnvironment:
    """A game as our `Environment` (see the module docstring). Picklable when the game is."""

    untrusted = True  # third-party code: the rollout runs it in worker processes only

    def __init__(self, make_game: GameFactory, success_reward: float) -> None:
        self.make_game = make_game
        self.success_reward = success_reward
        self.game: Game | None = None
        self.random_state: tuple[Any, Any] | None = None

    def reset(self, task: Task) -> str:
        """A fresh game seeded from the task; its first observation."""
        seed = int(task.reference["seed"])
        self.game = self.make_game(task.reference)
        with own_random(seeded_state(seed)) as after:
            first = self.game.reset(seed)
        self.random_state = after[0]
        return first

    def step(self, action: str) -> Step:
        """Play the action; when the game ends, its final reward is the verdict."""
        if self.game is None or self.random_state is None:
            raise RuntimeError("step() before reset(): call reset(task) to start an episode")
        with own_random(self.random_state) as after:
            moved = self.game.step(action)
        self.random_state = after[0]
        if moved.done or not finite_number(moved.reward):  # a turn reward that is no number ends the episode: error
            self.game = None
            return Step("", outcome(moved.reward, self.success_reward, moved.info), done=True)
        return Step(moved.observation, None, done=False, reward=float(moved.reward))


def play(environment: GameEnvironment, task: Task, policy: Expert, max_turns: int) -> list[str]:
    """An episode of `policy` on `task`: [first observation, action, observation, ..., last action]. The policy
    may draw from the global generators: they are seeded from the task's seed for the episode (and restored)."""
    observations, actions = [environment.reset(task)], []
    with own_random(seeded_state(int(task.reference["seed"]) + 1)):
        for _ in range(max_turns):
            actions.append(policy(observations, actions))
            step = environment.step(actions[-1])
            if step.done:
                break
            observations.append(step.observation)
    return [text for pair in zip(observations, actions) for text in pair]


def load_expert(path: str) -> Expert:
    """The function a `module:function` path names (ValueError when it does not import)."""
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"cannot load the expert {path!r}: {e}; give an importable 'module:function'") from e


class ReplayVerifier:
    """The verifier of a game domain: a completion played as the single action of the task's episode (the
    reward audit's attacks and `rlvr verify` go through it; in the pool's worker process)."""

    def __init__(self, environment: Callable[[], GameEnvironment]) -> None:
        self.environment = environment

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """Never judged here: the game is third-party code."""
        return None

    def score(self, completion: str, gold: str) -> Score:
        """The game's verdict on `completion` as its one action; unfinished after it: reward 0."""
        environment = self.environment()
        environment.reset(Task("replay", "", "", json.loads(gold), 0, "", ""))
        step = environment.step(completion)
        return step.score if step.done and step.score is not None else UNFINISHED


class GameDomain:
    """The domain half shared by the packages' domains: seeded tasks, an episode verdict, expert demonstrations.

    A subclass sets `name` and `source` and implements `make_game(reference)`."""

    name = "game"
    report_breakdown = ("env_reward",)
    shaped_reward = "the reward is the game's own: a partly right play earns the share the game gives it"
    # the reward audit fails an attack on a game only when it wins on most tasks (a universal move)
    chance_wins = "a move may win a game by chance (a guess that happens to be right)"

    def __init__(self, splits: Mapping[str, int], seed: int, success_reward: float, expert: str | None,
                 max_turns: int, workers: int, timeout_seconds: float) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.splits = dict(splits)
        self.seed = seed
        self.success_reward = success_reward
        self.expert = expert
        self.max_turns = max_turns
        self.workers = workers
        self.timeout_seconds = timeout_seconds
        self.verifier = ReplayVerifier(self.environment)
        self._episodes: dict[int, list[str]] = {}

    def make_game(self, reference: Mapping[str, Any]) -> Game:
        raise NotImplementedError

    def environment(self) -> GameEnvironment:
        """A fresh environment that plays this domain's games."""
        return GameEnvironment(self.make_game, self.success_reward)

    def references(self) -> list[tuple[str, int, dict[str, Any]]]:
        """(split, index, reference) of every task: distinct seeds below `SEED_SPACE`, drawn from `seed`."""
        total = sum(self.splits.values())
        seeds = iter(random.Random(self.seed).sample(range(SEED_SPACE), total))
        return [(split, i, {"seed": next(seeds)}) for split, count in self.splits.items() for i in range(count)]

    def _in_workers(self, function: Callable[[tuple[GameDomain, Mapping[str, Any]]], Any],
                    references: Sequence[Mapping[str, Any]]) -> list[Any]:
        """`function((self, reference))` for each reference, as scheduler jobs in worker processes, each under
        `timeout_seconds`: its value, or the `JobResult` that failed."""
        settings = {"workers": self.workers, "timeout_seconds": self.timeout_seconds,
                    "retry": {"max_attempts": 1, "retry_timeouts": False}}
        with create_scheduler(settings) as scheduler:
            results = scheduler.map(function, [(self, r) for r in references])
            return [r.value if r.ok else r for r in results]

    def rows(self) -> list[dict[str, Any]]:
        """One task row per seed, its prompt the game's first observation (reset in a worker process); a seed
        whose reset failed or hung gives a row with `_error`, which curation quarantines."""
        references = self.references()
        firsts = iter(self._in_workers(first_observation, [r for *_, r in references if "_error" not in r]))
        return [self._row(split, i, reference, None if "_error" in reference else next(firsts))
                for split, i, reference in references]

    def _row(self, split: str, index: int, reference: dict[str, Any], first: Any) -> dict[str, Any]:
        """A task row: the first observation as its prompt, or the reason it has none in `_error`."""
        row = Task(f"{self.name}-{split}-{index:05d}", self.name, "", reference, 1, split, self.source).to_row()
        if "_error" in reference:
            row["_error"] = reference["_error"]
        elif isinstance(first, str):
            row["prompt"] = first
        else:
            row["_error"] = f"the game's reset failed ({first.status}): {first.error}"
        return row

    def generate_tasks(self) -> list[Task]:
        """One task per seed whose game resets (`rows`)."""
        return [Task(r["task_id"], r["domain"], r["prompt"], json.loads(r["reference"]), r["difficulty"], r["split"],
                     r["source"]) for r in self.rows() if "_error" not in r]

    @property
    def source(self) -> str:
        return f"generated:seed={self.seed}"

    @staticmethod
    def task_key(task: Task) -> str:
        """What tells two tasks apart in curation: their seed (the first observation may hide it)."""
        return json.dumps(task.reference, sort_keys=True)

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The task's reference as JSON: what the replay verifier builds the game from."""
        return json.dumps(reference, sort_keys=True)

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The game's verdict on `completion` as the episode's one action (in this process)."""
        return self.verifier.score(completion, self.gold(reference))

    def answer_form(self, task: Task) -> AnswerForm:
        """For the reward audit: an answer is the action itself, with no reference text to restate."""
        return AnswerForm({"action": None}, lambda texts: texts["action"])

    def expert_episodes(self, references: Sequence[Mapping[str, Any]]) -> list[list[str]]:
        """The expert's episode on each reference (each seed played once, in a worker process)."""
        if self.expert is None:
            raise ValueError(f"domain {self.name!r} has no expert: set domain.expert to a 'module:function' that "
                             "plays the game, for demonstrations and the base model's corpus")
        wanted = list({int(r["seed"]): r for r in references if int(r["seed"]) not in self._episodes}.values())
        for reference, episode in zip(wanted, self._in_workers(expert_episode, wanted)):
            if not isinstance(episode, list):
                raise ValueError(f"the expert {self.expert} failed on seed {reference['seed']} ({episode.status}): "
                                 f"{episode.error}")
            self._episodes[int(reference["seed"])] = episode
        return [self._episodes[int(r["seed"])] for r in references]

    def tool_demonstration(self, task: Task) -> list[str]:
        """The expert's episode on the task after its first observation: action, observation, ..., last action
        (the first call plays every task of the task's split, in one worker)."""
        same_split = [r for split, _, r in self.references() if split == task.split]
        return self.expert_episodes([*same_split, task.reference])[-1][1:]

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The expert's first action (a game has no worked form: `worked` changes nothing)."""
        return self.tool_demonstration(task)[0]

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """The expert's episodes as plain text, on seeds above `SEED_SPACE`, so on no task's seed (`exclude`, the
        held-out prompts, cannot tell games apart: a seeded game's first observation may be every task's)."""
        rng = random.Random(seed)
        references = [{"seed": SEED_SPACE + rng.randrange(SEED_SPACE)} for _ in range(size)]
        return ["\n".join(episode) for episode in self.expert_episodes(references)]


def first_observation(job: tuple[GameDomain, Mapping[str, Any]]) -> str:
    """A reference's first observation (a scheduler job of `GameDomain.rows`)."""
    domain, reference = job
    return domain.environment().reset(Task("prompt", domain.name, "", dict(reference), 1, "", ""))


def expert_episode(job: tuple[GameDomain, Mapping[str, Any]]) -> list[str]:
    """The expert's episode on a reference (a scheduler job of `GameDomain.expert_episodes`)."""
    domain, reference = job
    assert domain.expert is not None
    policy = load_expert(domain.expert)
    return play(domain.environment(), Task("expert", domain.name, "", dict(reference), 1, "", ""), policy,
                domain.max_turns)
