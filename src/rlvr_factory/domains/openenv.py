"""OpenEnv environments (`pip install -e '.[openenv]'`) as a domain: `domain.name: openenv`.

An OpenEnv environment is a server (FastAPI, from `openenv-core`) whose WebSocket sessions each
hold one instance of the environment: `reset(seed, **options)`, then `step(action)` returning an
observation, a reward and `done`. The domain reaches it in one of two ways:

- `env_dir`: a directory in OpenEnv's layout (an `openenv.yaml` naming its `app`, as `openenv init`
  writes it, and as the environments of OpenEnv's repository are). Each process that plays (a
  scheduler worker of the rollout, the verifier's worker, the workers that make the prompts)
  starts its own server from it, uvicorn on 127.0.0.1 on a port the OS picks, once; the server
  stops when that process ends, killed or not (it watches its parent). One server per worker:
  each serves one call at a time, so an environment that allows one session (`openenv init`'s
  default) serves every worker;
- `url`: a server that is already running, shared by every worker (it must allow as many
  sessions as `rollout.environment.workers`).

Every call is a session of its own: it resets with the task's seed and `reset_options`, replays
the episode's moves so far, then plays the new one, and closes. So nothing of a session outlives
the call, an episode pickles as its seed and moves, and any worker can continue it; the price is
turns^2/2 steps per episode, and the environment must repeat exactly from a seed (one that ignores
the seed shows other observations when replayed: the call fails with `error`, naming the turn;
`rlvr check-env` checks `repeats`).

The model's text is the action's `action_field`; the observation shown is its `observation_field`,
or, when that is null, the whole observation as JSON (`reward`, `done` and `metadata` left out).
Failures: a server that will not start, cannot be reached, dies, or refuses a session (capacity,
factory) is `InfraError`, so an `infra_error` episode, never a wrong answer; an action the
environment rejects or fails on is an `error` episode with the server's message.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr_factory.domains.gym_text import Game, GameDomain, Transition
from rlvr_factory.scheduler import InfraError

# The server process: the app from its directory, on the listening socket it inherits, until its parent is gone.
SERVE = """
import os, sys, threading, time, uvicorn
app, fd, parent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def orphaned():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=orphaned, daemon=True).start()
sys.path.insert(0, os.getcwd())
uvicorn.Server(uvicorn.Config(app, fd=fd, log_level="warning", ws_max_size=16 * 2**20)).run()
"""
INFRA_CODES = {"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"}  # the server's failures, not the action's
OBSERVATION_HIDDEN = ("reward", "done", "metadata")


def read_app(env_dir: str) -> str:
    """The `app` (`module:attr`) an OpenEnv environment directory's `openenv.yaml` names."""
    import yaml

    spec = Path(env_dir) / "openenv.yaml"
    if not spec.is_file():
        raise ValueError(f"{env_dir} is not an OpenEnv environment: it has no openenv.yaml (`openenv init` makes one)")
    app = (yaml.safe_load(spec.read_text()) or {}).get("app")
    if not isinstance(app, str) or ":" not in app:
        raise ValueError(f"{spec} names no app as 'module:attr' (e.g. app: server.app:app), got {app!r}")
    return app


@dataclass
class Server:
    """A started server: its process, its address and the file its output goes to."""

    process: subprocess.Popen
    url: str
    log: Path

    def stop(self) -> None:
        """End the server and remove its output file (at the exit of the process that started it)."""
        self.process.kill()
        self.process.wait()
        self.log.unlink(missing_ok=True)

    def failure(self) -> str:
        """The last lines of the server's output (where a traceback names its error), for an error message."""
        lines = self.log.read_text(errors="replace").strip().splitlines() if self.log.exists() else []
        return " | ".join(line.strip() for line in lines[-2:])[-300:]


_STARTED: dict[tuple[int, str], Server] = {}  # (process id, env_dir) -> the server this process started


def start_server(env_dir: str, start_seconds: float) -> Server:
    """Start the environment of `env_dir` on 127.0.0.1 (a port the OS picks) and wait until it answers
    `/health`; InfraError with its output when it exits or does not answer in `start_seconds`."""
    app = read_app(env_dir)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    log = Path(tempfile.mkstemp(prefix="openenv_", suffix=".log")[1])
    with log.open("wb") as out, listener:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE, app, str(listener.fileno()), str(os.getpid())], cwd=env_dir,
            pass_fds=(listener.fileno(),), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        server = Server(process, f"http://127.0.0.1:{listener.getsockname()[1]}", log)
    atexit.register(server.stop)
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never through a proxy
    deadline = time.monotonic() + start_seconds
    while process.poll() is None and time.monotonic() < deadline:
        try:
            with direct.open(f"{server.url}/health", timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise InfraError(f"the OpenEnv server did not start within {start_seconds:g} s (exit code {process.wait()}): "
                     f"{server.failure()} [{app} in {env_dir}]")


def server_url(env_dir: str, start_seconds: float) -> str:
    """The address of this process's server for `env_dir`, started on first use (again if it died)."""
    key = (os.getpid(), str(Path(env_dir).resolve()))
    server = _STARTED.get(key)
    if server is None or server.process.poll() is not None:
        server = _STARTED[key] = start_server(env_dir, start_seconds)
    return server.url


def render(observation: Mapping[str, Any], field: str | None) -> str:
    """The observation as the model sees it: its `field`, or all of it but reward, done and metadata as JSON."""
    if field is None:
        shown = {k: v for k, v in observation.items() if k not in OBSERVATION_HIDDEN}
        return json.dumps(shown, sort_keys=True, ensure_ascii=False)
    if field not in observation:
        raise ValueError(f"the observation has no field {field!r} (domain.observation_field); it has "
                         f"{sorted(observation)}")
    value = observation[field]
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def server_error(error: RuntimeError) -> Exception:
    """The client's error as ours: a failure of the server is `InfraError`, one of the action stays as it is."""
    code = re.search(r"\(code: (\w+)\)\s*$", str(error))
    return InfraError(str(error)) if code and code.group(1) in INFRA_CODES else error


class OpenEnvGame:
    """One episode of an OpenEnv environment as a `Game`: its seed and moves; each call is a session (see the
    module docstring). Picklable: it holds no connection."""

    def __init__(self, address: Mapping[str, Any], options: Mapping[str, Any], action_field: str,
                 observation_field: str | None, timeout_seconds: float) -> None:
        self.address = dict(address)
        self.options = dict(options)
        self.action_field = action_field
        self.observation_field = observation_field
        self.timeout_seconds = timeout_seconds
        self.seed: int | None = None
        self.moves: list[str] = []  # the episode's actions so far
        self.seen: list[str] = []  # what it was shown: the first observation, then each step's

    def reset(self, seed: int) -> str:
        """A session reset with `seed`: the first observation."""
        self.seed, self.moves, self.seen = seed, [], []
        self.seen.append(render(self._session([])[0].observation, self.observation_field))
        return self.seen[0]

    def step(self, action: str) -> Transition:
        """The moves so far replayed in a new session, then `action`: its observation, reward and `done`. A replay
        that does not see what the episode saw (an environment that does not repeat from its seed) is an error."""
        results = self._session([*self.moves, action])
        replayed = [render(r.observation, self.observation_field) for r in results[:-1]]
        if replayed != self.seen or any(r.done for r in results[1:-1]):
            turn = next((i for i, (a, b) in enumerate(zip(replayed, self.seen)) if a != b), len(self.seen) - 1)
            raise RuntimeError(f"the environment does not repeat from its seed: replaying the episode, turn {turn} "
                               f"gave {replayed[turn][:120]!r}, not {self.seen[turn][:120]!r} (domain openenv "
                               "replays each episode in a new session; `rlvr check-env` checks `repeats`)")
        last = results[-1]
        self.moves.append(action)
        self.seen.append(render(last.observation, self.observation_field))
        reward = 0.0 if last.reward is None and not last.done else last.reward  # OpenEnv: None means no reward yet
        return Transition(self.seen[-1], reward, bool(last.done))

    def _session(self, moves: Sequence[str]) -> list[Any]:
        """Reset and play `moves` in one session: the reset's result and each step's."""
        if self.seed is None:
            raise RuntimeError("step() before reset()")
        url = self.address["url"] or server_url(self.address["env_dir"], self.address["start_seconds"])
        try:
            return asyncio.run(self._play(url, moves))
        except RuntimeError as e:
            raise server_error(e) from e
        except (OSError, ConnectionError, asyncio.TimeoutError) as e:
            raise InfraError(f"the OpenEnv server at {url} failed: {type(e).__name__}: {e}") from e

    async def _play(self, url: str, moves: Sequence[str]) -> list[Any]:
        from openenv.core import GenericEnvClient
        from websockets.exceptions import ConnectionClosed

        client = GenericEnvClient(base_url=url, connect_timeout_s=self.timeout_seconds,
                                  message_timeout_s=self.timeout_seconds)
        try:
            results = [await client.reset(seed=self.seed, **self.options)]
            for move in moves:
                results.append(await client.step({self.action_field: move}))
            return results
        except ConnectionClosed as e:
            raise ConnectionError(f"the server closed the session: {e}") from e
        finally:
            await client.close()


class OpenEnvDomain(GameDomain):
    """An OpenEnv environment (a directory to serve, or a running server's URL); tasks are its seeds."""

    name = "openenv"

    def __init__(
        self,
        env_dir: str | None = None,  # an OpenEnv environment directory (its openenv.yaml names the app): each worker serves it
        url: str | None = None,  # or a running server's address (http://host:port), shared by every worker
        reset_options: Mapping[str, Any] | None = None,  # keyword arguments of every reset besides the seed
        action_field: str = "message",  # the action's field that holds the model's text
        observation_field: str | None = None,  # the observation's field shown to the model; null: all of it as JSON
        splits: Mapping[str, int] | None = None,  # seeds per split (default: train 200, validation 50, test 100)
        seed: int = 0,  # draws the tasks' seeds
        success_reward: float = 1.0,  # an episode whose final reward reaches this is correct
        expert: str | None = None,  # 'module:function' (observations, actions) -> action: demonstrations and corpus
        max_turns: int = 8,  # moves of an expert episode at most (the loop's rollout.max_turns when it runs)
        workers: int = 2,  # worker processes that reset the games for the prompts and play the expert
        timeout_seconds: float = 60.0,  # limit of one such call; also of each message to the server
        start_seconds: float = 60.0,  # a server started from env_dir must answer /health within this
    ) -> None:
        super().__init__(splits or {"train": 200, "validation": 50, "test": 100}, seed, success_reward, expert,
                         max_turns, workers, timeout_seconds)
        if (env_dir is None) == (url is None):
            raise ValueError("domain openenv needs exactly one of env_dir (a directory to serve) and url "
                             f"(a running server), got env_dir={env_dir!r}, url={url!r}")
        if env_dir is not None:
            read_app(env_dir)
        check_installed()
        self.address = {"env_dir": env_dir and str(Path(env_dir).resolve()), "url": url,
                        "start_seconds": start_seconds}
        self.reset_options = dict(reset_options or {})
        if "seed" in self.reset_options:
            raise ValueError("domain.reset_options sets no seed: each task's seed is its own")
        self.action_field = action_field
        self.observation_field = observation_field

    @property
    def source(self) -> str:
        return f"openenv:{self.address['url'] or Path(self.address['env_dir']).name}:seed={self.seed}"

    def make_game(self, reference: Mapping[str, Any]) -> Game:
        """A fresh episode of the domain's environment."""
        return OpenEnvGame(self.address, self.reset_options, self.action_field, self.observation_field,
                           self.timeout_seconds)


def check_installed() -> None:
    """ImportError saying how to install openenv-core when it is missing."""
    try:
        import openenv.core  # noqa: F401
    except ImportError as e:
        raise ImportError(f"domain openenv needs openenv-core: pip install -e '.[openenv]' ({e})") from e
