"""The project's config loader: Kedro's OmegaConfigLoader, with environments that change single keys.

Kedro merges an environment's parameters over base's block by block, so an environment that sets
`rl: {rounds: 30}` would drop every other `rl` key; and it merges runtime parameters into the base
layer and into the environment's layer alike, so `--params=rl.rounds=2` under `--env=mixed`
becomes an environment block that replaces base's. Here an environment's blocks merge into base's
key by key, except the blocks in `REPLACED` (a `domain` block names another domain, whose keys
differ), which replace base's whole; the runtime parameters are merged into the result last.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kedro.config import MissingConfigException, OmegaConfigLoader
from omegaconf import OmegaConf

REPLACED = ("domain",)  # parameter blocks an environment replaces whole instead of key by key


class ConfigLoader(OmegaConfigLoader):
    """OmegaConfigLoader whose environments and runtime parameters override single keys.

    The latest instance is kept as `ConfigLoader.latest`: a Kedro session makes one for its
    environment and runtime parameters, so the pipeline registry can shape the pipelines
    from the run's configuration even where no hook runs (`kedro viz` without
    `--include-hooks`).
    """

    latest: ClassVar[ConfigLoader | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ConfigLoader.latest = self

    def __getitem__(self, key: str) -> dict[str, Any]:
        run_env = self.env or self.default_run_env
        if key != "parameters" or run_env == self.base_env or key in self:
            return super().__getitem__(key)
        layers = [self._layer(env) for env in (self.base_env, run_env)]
        merged = OmegaConf.merge(
            {k: v for k, v in layers[0].items() if not (k in REPLACED and k in layers[1])}, layers[1],
            self.runtime_params or {},
        )
        return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]

    def _layer(self, env: str) -> dict[str, Any]:
        """One environment's parameters alone (no runtime parameters); empty when it has none."""
        layer = OmegaConfigLoader(
            self.conf_source, env=env, base_env=env, default_run_env=env, config_patterns=self.config_patterns,
            custom_resolvers=self._custom_resolvers,  # Kedro's loader unregisters `oc.env` for every process
        )
        try:
            return layer["parameters"]
        except MissingConfigException:  # an environment without parameter files adds nothing
            return {}
