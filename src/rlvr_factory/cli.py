"""The project's `kedro` commands: Kedro's own, with `kedro run` running the RL rounds in its round loop.

Kedro reads a project's `cli.py` and lets its commands replace the framework's; only the default of
`kedro run --runner` changes here, to `RoundLoopRunner` (`pipelines/rl/loop.py`), which runs any pipeline as
Kedro's `SequentialRunner` does and repeats the declared RL round `rl.rounds` times.
"""

from __future__ import annotations

import copy

import click
from kedro.framework.cli.project import run as kedro_run

RUNNER = "rlvr_factory.pipelines.rl.loop.RoundLoopRunner"


def _with_default_runner(command: click.Command, runner: str) -> click.Command:
    """`command` with its `--runner` option defaulting to `runner`."""
    command = copy.copy(command)
    command.params = [copy.copy(p) for p in command.params]
    for param in command.params:
        if param.name == "runner":
            param.default = runner
            param.help = f"{param.help} Default: {runner} (the RL round loop; any other pipeline runs sequentially)."
    return command


@click.group(name="rlvr_factory")
def cli() -> None:
    """RLVR Factory's project commands."""


cli.add_command(_with_default_runner(kedro_run, RUNNER), "run")
