"""The project's config loader: Kedro's OmegaConfigLoader with `--params` applied once, on top.

Kedro merges runtime parameters into the base layer and into the run environment's layer
alike, so with `--env=mixed` a `--params=rl.rounds=2` becomes an environment block
`rl: {rounds: 2}` that replaces base's whole `rl` block. Here the layers merge first
(an environment's block still replaces base's block of the same name) and the runtime
parameters are merged into the result key by key.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kedro.config import OmegaConfigLoader
from omegaconf import OmegaConf


class ConfigLoader(OmegaConfigLoader):
    """OmegaConfigLoader whose runtime parameters override single keys in every environment.

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
        if key != "parameters" or not self.runtime_params or run_env == self.base_env or key in self:
            return super().__getitem__(key)
        runtime, self.runtime_params = self.runtime_params, {}
        try:
            layered = super().__getitem__(key)
        finally:
            self.runtime_params = runtime
        return OmegaConf.to_container(OmegaConf.merge(layered, runtime), resolve=True)  # type: ignore[return-value]
