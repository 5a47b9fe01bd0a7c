"""GuessTheNumber as an OpenEnv environment: a number from 1 to 20, drawn from the reset's seed; each guess
is answered 'higher' or 'lower'; reward 1 when found within the guesses allowed (then the game ends), 0
otherwise. An example of an environment of one's own, in OpenEnv's layout, for `domain.name: openenv`."""

import random
import re
from typing import Any, Optional
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from models import GuessAction, GuessObservation

LOW, HIGH = 1, 20


class GuessNumberEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.number = LOW
        self.left = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, guesses: int = 5,
              **kwargs: Any) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.number = random.Random(seed).randint(LOW, HIGH)
        self.left = guesses
        rules = (f"I am thinking of a number between {LOW} and {HIGH}. Find it in {guesses} guesses. "
                 "Write a guess as [n], e.g. [10].")
        return GuessObservation(message=rules, guesses_left=self.left, reward=0.0, done=False)

    def step(self, action: GuessAction, timeout_s: Optional[float] = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        self.left -= 1
        found = re.search(r"-?\d+", action.guess[:100])
        if found is None:
            message = "That is not a number."
        elif int(found.group()) == self.number:
            return GuessObservation(message="Correct!", guesses_left=self.left, reward=1.0, done=True)
        else:
            message = "The number is higher." if int(found.group()) < self.number else "The number is lower."
        return GuessObservation(message=message, guesses_left=self.left, reward=0.0, done=self.left <= 0)

    @property
    def state(self) -> State:
        return self._state
