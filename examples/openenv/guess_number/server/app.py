"""The server: `uvicorn server.app:app` from this directory (what `domain.name: openenv` runs)."""

from openenv.core.env_server.http_server import create_app

from models import GuessAction, GuessObservation
from server.environment import GuessNumberEnvironment

app = create_app(GuessNumberEnvironment, GuessAction, GuessObservation, env_name="guess_number", max_concurrent_envs=4)
