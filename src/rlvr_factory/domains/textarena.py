"""TextArena's games (`pip install -e '.[textarena]'`) as a domain: `domain.name: textarena`, `env_id: GuessTheNumber-v0`.

A task is a seed of the game (`domains/gym_text.py`). The game is built without TextArena's
observation wrappers (its default one repeats the whole history every turn) and with its action
wrappers (e.g. the one that brackets a bare move); each observation is the game's messages since
the model's last move, the model's own move left out (it is already in the context). The game's
reward comes when it ends (`close()`): 1 for a win, a game's partial credit or 0 otherwise (-1 for a
loss in a game of two), so an episode is correct when it reaches `success_reward`. The model is
player 0; in a game of more players (`num_players`) a scripted `opponent` plays the others
(`random_move`: one of the moves the game lists as available), its draws from the episode's own
seeded generator.

Games that need NLTK data (the word games) or a newer Python fail at their first reset; that
task's episodes end `error` with TextArena's message.
"""

from __future__ import annotations

from typing import Any, Mapping

import random
import re

from rlvr_factory.domains.gym_text import Game, GameDomain, Transition, load_expert

GAME_SENDER = -1  # TextArena's sender id of the game's own messages
MODEL = 0  # the player the model plays


def render(messages: list[tuple[int, str, Any]], player: int) -> str:
    """A player's new messages as text: the game's as they are, other players' named, the player's own moves left out."""
    lines = []
    for sender, text, kind in messages:
        if sender == player and getattr(kind, "name", "") == "PLAYER_ACTION":
            continue
        lines.append(text.strip() if sender == GAME_SENDER else f"[Player {sender}] {text.strip()}")
    return "\n".join(lines)


def registry() -> dict[str, Any]:
    """TextArena's registered games by id (ImportError saying how to install it)."""
    try:
        from textarena.envs.registration import ENV_REGISTRY
    except ImportError as e:
        raise ImportError(f"domain textarena needs TextArena: pip install -e '.[textarena]' ({e})") from e
    return ENV_REGISTRY


def check_game(env_id: str) -> None:
    """ValueError naming some games when TextArena has no game `env_id`."""
    games = registry()
    if env_id not in games or env_id.endswith("-raw"):
        known = sorted(k for k in games if k.endswith("-v0"))
        raise ValueError(f"TextArena has no game {env_id!r}; e.g. {known[:8]} ({len(known)} in all)")


def make_textarena(env_id: str, options: Mapping[str, Any]) -> tuple[Any, list[type]]:
    """The game `env_id` without wrappers, and the action wrappers TextArena registers for it (outermost last)."""
    import textarena
    from textarena.core import ActionWrapper

    check_game(env_id)
    spec = registry()[env_id]
    wrappers = [w for w in spec.default_wrappers or [] if issubclass(w, ActionWrapper)]
    return textarena.make(f"{env_id}-raw", **options), wrappers


class TextArenaGame:
    """One TextArena game as a `Game`: the model is player 0; in a game of more players the `opponent` (a
    `module:function` from a player's observation to its move) plays the others. It holds the bare game, which
    pickles (TextArena's wrappers do not unpickle), and applies the action wrappers to each move."""

    def __init__(self, env_id: str, options: Mapping[str, Any], num_players: int = 1, opponent: str | None = None) -> None:
        self.env, self.wrappers = make_textarena(env_id, options)
        self.num_players = num_players
        self.opponent = opponent

    def reset(self, seed: int) -> str:
        """The game seeded with `seed`; the model's first messages (after the opponents' moves, if they begin)."""
        self.env.reset(num_players=self.num_players, seed=seed)
        return self._until_model_moves(False).observation

    def step(self, action: str) -> Transition:
        """The model's move, then the opponents' until it is the model's turn again; at the game's end, the
        model's reward from `close()`."""
        return self._until_model_moves(self._move(action))

    def _move(self, action: str) -> bool:
        env = self.env
        for wrapper in self.wrappers:
            env = wrapper(env)
        done, _ = env.step(action)
        return done

    def _until_model_moves(self, done: bool) -> Transition:
        while not done:
            player, messages = self.env.get_observation()
            if player == MODEL:
                return Transition(render(messages, MODEL), 0.0, False)
            done = self._move(load_expert(self.opponent)(render(messages, player)))
        rewards, info = self.env.close()
        return Transition("", (rewards or {}).get(MODEL), True, (info or {}).get(MODEL))


class TextArenaDomain(GameDomain):
    """A TextArena game; tasks are its seeds. The model is player 0; `opponent` plays the others."""

    name = "textarena"

    def __init__(
        self,
        env_id: str = "GuessTheNumber-v0",  # the game (TextArena's id; its -raw variant is what runs)
        options: Mapping[str, Any] | None = None,  # keyword arguments of the game (textarena.make)
        splits: Mapping[str, int] | None = None,  # seeds per split (default: train 200, validation 50, test 100)
        seed: int = 0,  # draws the tasks' seeds
        success_reward: float = 1.0,  # an episode whose final reward reaches this is correct (a win)
        expert: str | None = None,  # 'module:function' (observations, actions) -> action: demonstrations and corpus
        max_turns: int = 8,  # moves of an expert episode at most (the loop's rollout.max_turns when it runs)
        workers: int = 2,  # worker processes that reset the games for the prompts and play the expert
        timeout_seconds: float = 60.0,  # limit of one such reset or expert episode (a task past it is quarantined)
        num_players: int = 1,  # players of the game; the model is player 0
        opponent: str | None = None,  # 'module:function' (observation) -> move for the other players, e.g. rlvr_factory.domains.textarena:random_move
    ) -> None:
        super().__init__(splits or {"train": 200, "validation": 50, "test": 100}, seed, success_reward, expert,
                         max_turns, workers, timeout_seconds)
        check_game(env_id)
        if num_players < 1 or num_players > 1 and opponent is None:
            raise ValueError(f"a game of {num_players} players needs an opponent: set domain.opponent to a "
                             "'module:function', e.g. rlvr_factory.domains.textarena:random_move")
        self.env_id = env_id
        self.options = dict(options or {})
        self.num_players = num_players
        self.opponent = opponent

    @property
    def source(self) -> str:
        return f"textarena:{self.env_id}:seed={self.seed}"

    def make_game(self, reference: Mapping[str, Any]) -> Game:
        """A fresh game of the domain's `env_id`."""
        return TextArenaGame(self.env_id, self.options, self.num_players, self.opponent)


def random_move(observation: str) -> str:
    """An opponent that plays one of the moves the game last listed as available (`'[4]'`, ...), drawn from the
    episode's own generator (`domains.gym_text.own_random`), else `[0]`."""
    listed = [line for line in observation.splitlines() if "available moves" in line.lower()]
    moves = re.findall(r"\[[^\[\]]+\]", listed[-1]) if listed else []
    return random.choice(moves) if moves else "[0]"


def _range(observations: list[str], actions: list[str]) -> tuple[int, int]:
    """GuessTheNumber's range as the game stated it, narrowed by each 'higher'/'lower' hint on a guess."""
    low, high = (int(n) for n in re.search(r"between (\d+) and (\d+)", observations[0]).groups())
    for action, hint in zip(actions, observations[1:]):
        guess = int(re.search(r"-?\d+", action).group())
        if "higher" in hint:
            low = max(low, guess + 1)
        elif "lower" in hint:
            high = min(high, guess - 1)
    return low, high


def guess_the_number(observations: list[str], actions: list[str]) -> str:
    """GuessTheNumber's expert: bisect the range, narrowed by each hint (wins within 5 guesses from 1..20)."""
    low, high = _range(observations, actions)
    return f"[{(low + high) // 2}]"


def guess_in_range(observations: list[str], actions: list[str]) -> str:
    """A weaker GuessTheNumber player: a number drawn uniformly from the range left (from the global generator,
    which `gym_text.play` seeds per task); it heeds every hint but does not bisect, so within 5 guesses it wins
    71% of games (bisection: all). Imitated, it is a policy with choices left for RL to sharpen."""
    low, high = _range(observations, actions)
    return f"[{random.randint(low, high)}]"
