"""The actions and observations of GuessTheNumber, an OpenEnv environment."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class GuessAction(Action):
    """A guess, as the player wrote it (the first integer in it counts)."""

    guess: str = Field(..., description="the player's guess, e.g. '[12]'")


class GuessObservation(Observation):
    """What the game says: its rules at the start, then whether the number is higher or lower."""

    message: str = Field(default="", description="the game's message")
    guesses_left: int = Field(default=0, description="guesses the player has left")
