"""SkyRL-Gym's environments (`pip install -e '.[skyrl-gym]'`) as a domain: `domain.name: skyrl_gym`, `env_id: gsm8k`.

SkyRL-Gym environments are data-driven: each task is a row of a data set in SkyRL's format
(`prompt`: chat messages or a string; `reward_spec` / `reward_model`: the ground truth; `extra_info`;
`env_class`, when given, must be `env_id`), read from local JSONL or Parquet files per split
(`data: {train: path, test: path}`; `shared:` paths read `$RLVR_SHARED_DATA`). The environment is
built from the row (`skyrl_gym.make(env_id, env_config, extras)`), `init` gives the first
observation, and `step` the observation messages, the step's reward and `done`
(`domains/gym_text.py` maps them onto our episodes: the last step's reward is the outcome).

Environments that run model output (`lcb` runs its programs, `text2sql` its SQL, `search` and
`searchcode` call servers) are refused until they run in our sandbox; `gsm8k`, `gsm8k_multi_turn`
and `aime` only parse answers.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

from rlvr_factory.domains.gym_text import Game, GameDomain, Transition
from rlvr_factory.domains.loaders import read_records, resolve

REFUSED = {
    "lcb": "runs the model's programs on the host",
    "text2sql": "runs the model's SQL on the host",
    "search": "calls a retrieval server",
    "searchcode": "calls a retrieval server and runs code",
    "rlm": "runs the model's code on the host",
}
EXTRA_KEYS = ("reward_spec", "reward_model", "extra_info")  # what of a row reaches the environment


def render(messages: Any) -> str:
    """Chat messages (or a string) as the text of one observation: their contents, in order."""
    if isinstance(messages, str):
        return messages
    return "\n".join(str(m["content"]) for m in messages)


def check_env(env_id: str) -> None:
    """ValueError when SkyRL-Gym has no environment `env_id` or it runs model output outside our sandbox."""
    try:
        from skyrl_gym.envs.registration import registry
    except ImportError as e:
        raise ImportError(f"domain skyrl_gym needs SkyRL-Gym: pip install -e '.[skyrl-gym]' ({e})") from e
    if env_id in REFUSED:
        raise ValueError(f"SkyRL-Gym's {env_id!r} {REFUSED[env_id]}, outside the sandbox; it is refused "
                         f"(usable here: {sorted(set(registry) - set(REFUSED))})")
    if env_id not in registry:
        raise ValueError(f"SkyRL-Gym has no environment {env_id!r}; registered: {sorted(registry)}")


class SkyRLGame:
    """One SkyRL-Gym environment on one row as a `Game`."""

    def __init__(self, env_id: str, env_config: Mapping[str, Any], reference: Mapping[str, Any]) -> None:
        import skyrl_gym

        self.env = skyrl_gym.make(env_id, env_config=dict(env_config), extras=dict(reference["extras"]))
        self.prompt = reference["prompt"]

    def reset(self, seed: int) -> str:
        """The row's prompt as the environment's `init` returns it (the seed only seeds the generators)."""
        observation, _ = self.env.init(self.prompt if isinstance(self.prompt, list) else
                                       [{"role": "user", "content": self.prompt}])
        return render(observation)

    def step(self, action: str) -> Transition:
        """The environment's step: its observation messages, reward and `done`."""
        out = self.env.step(action)
        if out["done"]:
            self.env.close()
        return Transition(render(out["observations"]), out["reward"], bool(out["done"]))


class SkyRLGymDomain(GameDomain):
    """A SkyRL-Gym environment over the rows of local data files."""

    name = "skyrl_gym"
    task_key = None  # rows' prompts tell them apart, and are compared for contamination like any data set's

    def __init__(
        self,
        data: Mapping[str, str],  # split -> a local JSONL or Parquet file of rows in SkyRL's format
        env_id: str = "gsm8k",  # the environment (SkyRL-Gym's id); a row's env_class, when given, must match
        env_config: Mapping[str, Any] | None = None,  # the environment's env_config
        limit: Mapping[str, int] | None = None,  # rows per split at most (the first ones)
        success_reward: float = 1.0,  # an episode whose final reward reaches this is correct
        expert: str | None = None,  # 'module:function' (observations, actions) -> action: demonstrations and corpus
        max_turns: int = 1,  # turns of an episode (the loop's rollout.max_turns); given to multi-turn environments
        workers: int = 2,  # worker processes that build the first observations and play the expert
        timeout_seconds: float = 60.0,  # limit of one such job (a row past it is quarantined)
    ) -> None:
        check_env(env_id)
        super().__init__({}, 0, success_reward, expert, max_turns, workers, timeout_seconds)
        self.data = dict(data)
        self.env_id = env_id
        self.env_config = dict(env_config or {})
        self.limit = dict(limit or {})

    @property
    def source(self) -> str:
        return f"skyrl_gym:{self.env_id}"

    def references(self) -> list[tuple[str, int, dict[str, Any]]]:
        """(split, index, reference) of every row: its prompt and what reaches the environment (`EXTRA_KEYS`,
        `max_turns`), numbered across the splits by its seed; a row that cannot be one holds the reason in `_error`."""
        rows = [(split, index, row) for split, path in self.data.items()
                for index, row in enumerate(read_records(resolve(path))[: self.limit.get(split)])]
        return [(split, index, {"seed": seed, **self._reference(row)}) for seed, (split, index, row) in enumerate(rows)]

    def _reference(self, row: Mapping[str, Any]) -> dict[str, Any]:
        prompt = row.get("prompt")
        if "_error" in row:
            return {"_error": str(row["_error"])}
        if not (isinstance(prompt, str) and prompt.strip()) and not (
                isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt)):
            return {"_error": "prompt: expected a non-empty string or a list of chat messages"}
        if row.get("env_class", self.env_id) != self.env_id:
            return {"_error": f"env_class {row['env_class']!r} is not env_id {self.env_id!r}"}
        extras = {k: row[k] for k in EXTRA_KEYS if k in row}
        extras.setdefault("extra_info", {})
        extras.setdefault("max_turns", self.max_turns)
        return {"prompt": prompt, "extras": extras}

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """The expert's episodes on train rows (drawn with `seed`) whose prompt is not in `exclude`, as plain text."""
        train = [r for split, _, r in self.references()
                 if split == "train" and "_error" not in r and render(r["prompt"]) not in exclude]
        if not train:
            raise ValueError("domain skyrl_gym: the base model's corpus plays the expert on train rows; there are none")
        rng = random.Random(seed)
        return ["\n".join(episode) for episode in self.expert_episodes([rng.choice(train) for _ in range(size)])]

    def make_game(self, reference: Mapping[str, Any]) -> Game:
        """A fresh environment on the reference's row."""
        return SkyRLGame(self.env_id, self.env_config, reference)
