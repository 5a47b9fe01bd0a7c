"""TextArena's games (`pip install -e '.[textarena]'`) as a domain: `domain.name: textarena`, `env_id: GuessTheNumber-v0`.

A task is a seed of the game (`domains/gym_text.py`). The game is built without TextArena's
observation wrappers (its default one repeats the whole history every turn) and with its action
wrappers (e.g. the one that brackets a bare move); each observation is the game's messages since
the model's last move, the model's own move left out (it is already in the context). The game's
reward comes when it ends (`close()`): 1 for a win, a game's partial credit or 0 otherwise, so an
episode is correct when it reaches `success_reward`. One-player games only, for now.

Games that need NLTK data (the word games) or a newer Python fail at their first reset; that
task's episodes end `error` with TextArena's message.
"""

from __future__ import annotations

from typing import Any, Mapping

from rlvr_factory.domains.gym_text import Game, GameDomain, Transition

GAME_SENDER = -1  # TextArena's sender id of the game's own messages


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
    """One TextArena game as a `Game` (one player). It holds the bare game, which pickles (TextArena's wrappers
    do not unpickle), and applies the action wrappers to each move."""

    def __init__(self, env_id: str, options: Mapping[str, Any]) -> None:
        self.env, self.wrappers = make_textarena(env_id, options)
        self.player = 0

    def reset(self, seed: int) -> str:
        """The game seeded with `seed`; the player's first messages."""
        self.env.reset(num_players=1, seed=seed)
        self.player, messages = self.env.get_observation()
        return render(messages, self.player)

    def step(self, action: str) -> Transition:
        """The move; at the game's end, the player's reward from `close()`."""
        env = self.env
        for wrapper in self.wrappers:
            env = wrapper(env)
        done, _ = env.step(action)
        if done:
            rewards, info = self.env.close()
            return Transition("", (rewards or {}).get(self.player), True, (info or {}).get(self.player))
        self.player, messages = self.env.get_observation()
        return Transition(render(messages, self.player), 0.0, False)


class TextArenaDomain(GameDomain):
    """A one-player TextArena game; tasks are its seeds."""

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
    ) -> None:
        super().__init__(splits or {"train": 200, "validation": 50, "test": 100}, seed, success_reward, expert,
                         max_turns, workers, timeout_seconds)
        check_game(env_id)
        self.env_id = env_id
        self.options = dict(options or {})

    @property
    def source(self) -> str:
        return f"textarena:{self.env_id}:seed={self.seed}"

    def make_game(self, reference: Mapping[str, Any]) -> Game:
        """A fresh game of the domain's `env_id`."""
        return TextArenaGame(self.env_id, self.options)


def guess_the_number(observations: list[str], actions: list[str]) -> str:
    """GuessTheNumber's expert: bisect the range the game stated, narrowed by each 'higher'/'lower' hint."""
    import re

    low, high = (int(n) for n in re.search(r"between (\d+) and (\d+)", observations[0]).groups())
    for action, hint in zip(actions, observations[1:]):
        guess = int(re.search(r"-?\d+", action).group())
        if "higher" in hint:
            low = max(low, guess + 1)
        elif "lower" in hint:
            high = min(high, guess - 1)
    return f"[{(low + high) // 2}]"
