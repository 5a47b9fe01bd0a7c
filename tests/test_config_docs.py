"""docs/configuration.md: the generated reference of every key is up to date and covers the whole tree."""

from __future__ import annotations

import dataclasses

from rlvr_factory import config_docs
from rlvr_factory.domains.registry import DomainConfig, settings_class
from rlvr_factory.parameters import Parameters
from rlvr_factory.schema import configurable, field_types


def _leaves(cls: type, prefix: str = ""):
    """(block, key) of every setting under the dataclass `cls`."""
    for name in configurable(cls):
        if cls is DomainConfig and name == "settings":
            continue  # the domain's own keys, whose rows are per domain (below)
        block = config_docs._block(field_types(cls)[name])
        if block is not None:
            yield from _leaves(block, f"{prefix}{name}.")
        elif prefix:
            yield prefix, name


def test_the_reference_is_up_to_date():
    assert config_docs.DOCS.read_text() == config_docs.render(), "run `python -m rlvr_factory.config_docs`"


def test_every_key_has_a_row_with_its_comment_in_its_blocks_section():
    text = config_docs.render()
    sections = {s.split("`", 2)[1]: s for s in text.split("\n## ")[1:]}
    for block, key in _leaves(Parameters):
        section = sections[block.rstrip(".")]
        row = next(line for line in section.splitlines() if line.startswith(f"| `{key}` |"))
        assert not row.endswith("|  |"), f"{block}{key} has no comment in its dataclass"


def test_every_builtin_domains_keys_have_rows_with_their_comments():
    # the domain block's keys are each domain's constructor arguments: documented where they are declared
    text = config_docs.render()
    domains = config_docs._builtin_domains()
    assert {"arithmetic", "cad", "code", "code_repair", "mix", "reasoning_gym"} <= set(domains)
    for name, factory in domains.items():
        section = text.split(f"### `domain.name: {name}`", 1)[1].split("\n#", 1)[0]
        for field in dataclasses.fields(settings_class(factory)):
            row = next(line for line in section.splitlines() if line.startswith(f"| `{field.name}` |"))
            assert not row.endswith("|  |"), f"domain {name}: {field.name} has no comment in its constructor"
