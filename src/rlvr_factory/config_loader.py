"""The project's config loader: Kedro's OmegaConfigLoader, with environments that change single keys.

Kedro merges an environment's parameters over base's block by block, so an environment that sets
`rl: {rounds: 30}` would drop every other `rl` key; and it merges runtime parameters into the base
layer and into the environment's layer alike, so `--params=rl.rounds=2` under `--env=mixed`
becomes an environment block that replaces base's. Here an environment's blocks merge into base's
key by key, except the blocks in `REPLACED` (a `domain` block names another domain, whose keys
differ), which replace base's whole; the runtime parameters are merged into the result last.

Each environment's data has a place of its own: the catalog's paths start with `${data_root:}`, which
is `data` for a plain `kedro run` (the default run environment, `local`) and `data/envs/ENV` under
`--env ENV`, so a run of another configuration never rewrites another's files. DVC's stages run the
base configuration alone (`--env base`: a user's conf/local cannot leak into them) and so write the
committed reference results to `data/envs/base`, where no other run writes.

The merged parameters are then checked against the typed tree (`rlvr_factory.parameters`) and
returned with every default filled in: an unknown key, or a value of the wrong type or range,
fails here, when the session first reads its parameters, naming the key and the file that set it.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar, Mapping

from kedro.config import MissingConfigException, OmegaConfigLoader
from omegaconf import OmegaConf

from rlvr_factory.parameters import resolve
from rlvr_factory.schema import ConfigError

DATA = "data"  # a plain `kedro run`'s data layers; other environments' (DVC's `--env base` too) lie in DATA/envs/ENV
REPLACED = ("domain",)  # parameter blocks an environment replaces whole instead of key by key


def _register(name: str, resolver: Any) -> None:
    """`OmegaConf.register_new_resolver(..., replace=True)`: the call omegaconf 2.3 (the vLLM venv's) and 2.4 share;
    2.4 deprecates it, as it does for Kedro's own calls."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"register_new_resolver\(\) is deprecated", category=UserWarning)
        OmegaConf.register_new_resolver(name, resolver, replace=True)


if not OmegaConf.has_resolver("data_root"):  # a plain OmegaConfigLoader on conf/ reads the default run's
    _register("data_root", lambda: DATA)


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
        # Registered per loader (Kedro registers a custom resolver only once per process): the
        # catalog this loader reads resolves to its own environment's place.
        _register("data_root", lambda: self.data_root)

    @property
    def data_root(self) -> str:
        """Where this environment's data layers lie: `data` for the default run environment, `data/envs/ENV` otherwise."""
        return data_root(self.env or self.default_run_env, self.default_run_env)

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key != "parameters" or key in self:
            return super().__getitem__(key)
        try:
            return resolve(self._merged_parameters())
        except ConfigError as e:
            raise e.found_in(self._source_of(e.key)) from None

    def _merged_parameters(self) -> dict[str, Any]:
        """The base environment's parameters, the run environment's over them, the runtime ones last."""
        run_env = self.env or self.default_run_env
        if run_env == self.base_env:
            return super().__getitem__("parameters")
        layers = [self._layer(env) for env in (self.base_env, run_env)]
        merged = OmegaConf.merge(
            {k: v for k, v in layers[0].items() if not (k in REPLACED and k in layers[1])}, layers[1],
            self.runtime_params or {},
        )
        return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]

    def _source_of(self, key: str) -> str:
        """Where the setting `key` (dotted) comes from: `--params`, else the last file that sets it."""
        if _holds(self.runtime_params or {}, key):
            return "--params"
        root = Path(self.conf_source)
        for env in dict.fromkeys([self.env or self.default_run_env, self.base_env]):
            for path in sorted((root / env).glob("**/parameters*.yml")):
                if _holds(OmegaConf.to_container(OmegaConf.load(path)) or {}, key):
                    return str(path.relative_to(root.parent) if root.is_absolute() else path)
        return "the defaults in rlvr_factory.parameters"

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


def data_root(env: str | None, default_env: str = "local") -> str:
    """The data folder of the configuration environment `env`: `data` for the default run environment (a plain
    `kedro run`), `data/envs/ENV` for any other (`--env base`, DVC's stages, included)."""
    return DATA if env in (None, default_env) else f"{DATA}/envs/{env}"


def _holds(tree: Mapping[str, Any], key: str) -> bool:
    """Whether the nested mapping `tree` sets the dotted `key` (as a path, or a flat dotted key)."""
    if key in tree:
        return True
    head, _, rest = key.partition(".")
    head = head.split("[", 1)[0]
    value = tree.get(head)
    if not rest:
        return head in tree
    return isinstance(value, Mapping) and _holds(value, rest)
