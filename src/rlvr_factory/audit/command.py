"""`rlvr audit`: the reward audit from the command line, on the project's configuration or on any registered domain.

    rlvr audit                                   # the run's domain (conf/base), as `kedro run` would build it
    rlvr audit --env reasoning_gym --tasks 16    # an environment's domain, 16 tasks per family
    rlvr audit --params domain.datasets=[puzzle24,coin_flip]
    rlvr audit --domain code                     # a registered domain with its default parameters

It prints one row per domain or family (attacks tried, paid, what paid), writes the JSON report (`--output`,
default data/08_reporting/reward_audit.json, data/envs/ENV/08_reporting/reward_audit.json under --env ENV,
where `kedro run --env ENV` writes its own) and its heatmap beside it (`.png`) and exits 1 when any domain or family pays an attack, so that a
long run can be gated on it; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

REPORT = "08_reporting/reward_audit.json"  # under the environment's data folder (config_loader.data_root)


class AuditUsageError(Exception):
    """Bad arguments or configuration: one line on stderr, exit status 2."""


def add_parser(commands: Any) -> None:
    """The `audit` subcommand and its options."""
    audit = commands.add_parser("audit", help="attack every domain and task family's reward; report what pays",
                                description=__doc__.split("\n\n")[0])
    add_domain_options(audit, "audited")
    audit.add_argument("--tasks", type=int, default=None, help="tasks attacked per domain or family (default: curate.audit)")
    audit.add_argument("--workers", type=int, default=None, help="verifier workers (default: the configuration's)")
    audit.add_argument("--output", default=None, help=f"the JSON report (default data/{REPORT}, or data/envs/ENV/{REPORT} "
                       "under --env ENV); - for none")
    audit.set_defaults(run=run)


def add_domain_options(parser: argparse.ArgumentParser, what: str) -> None:
    """--env or --domain, and --params: which domain a command takes (`domain_parameters` reads them)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--env", default=None, help=f"the configuration environment whose domain is {what} (conf/ENV)")
    where.add_argument("--domain", default=None, help=f"the domain {what}: a registered name or module:attr, with "
                       "its default parameters")
    parser.add_argument("--params", default="", help="runtime parameters as `kedro run` takes them (a.b=1,c=x)")


def domain_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters `add_domain_options` names: the project's (conf/, --env) or the defaults with --domain's
    name, --params applied either way; every default filled in."""
    given = runtime_params(args.params)
    if args.domain is None:
        return project_parameters(args.env, given)
    given["domain"] = {**(given.get("domain") or {}), "name": args.domain}  # --params may set its keys
    return resolved(given)


def runtime_params(text: str) -> dict[str, Any]:
    """`a.b=1,c=x` as a nested dict (values read as YAML: numbers, booleans, lists); a bad item is a usage error."""
    params: dict[str, Any] = {}
    for item in _items(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AuditUsageError(f"--params items must be key=value, got {item!r}")
        node = params
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise AuditUsageError(f"--params {key}: {value!r} is not a value ({e.problem})") from None
    return params


def _items(text: str) -> list[str]:
    """Comma-separated items, commas inside brackets kept."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    return [i for i in [*items, current] if i.strip()]


def project_parameters(env: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters, as `kedro run --env ENV --params ...` would read them from the project's conf/."""
    from kedro.framework.project import settings
    from kedro.framework.startup import bootstrap_project

    from rlvr_factory.config_loader import ConfigLoader
    from rlvr_factory.schema import ConfigError

    root = Path.cwd()
    if not (root / "pyproject.toml").exists() or not (root / "conf").is_dir():
        raise AuditUsageError(f"{root} is not the project's directory (no pyproject.toml and conf/); run rlvr audit "
                              "there, or name a domain with --domain")
    bootstrap_project(root)
    env = env or os.environ.get("KEDRO_ENV")
    if env and not (root / settings.CONF_SOURCE / env).is_dir():
        raise AuditUsageError(f"no configuration environment {env!r} in {root / settings.CONF_SOURCE}")
    try:
        return ConfigLoader(str(root / settings.CONF_SOURCE), env=env, runtime_params=params,
                            **settings.CONFIG_LOADER_ARGS)["parameters"]
    except ConfigError as e:
        raise AuditUsageError(str(e)) from None


def resolved(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters checked against the typed tree, every default filled in; a bad key is a usage error."""
    from rlvr_factory.parameters import resolve
    from rlvr_factory.schema import ConfigError

    try:
        return resolve(params)
    except ConfigError as e:
        raise AuditUsageError(str(e)) from None


def default_output(env: str | None) -> str:
    """Where the report goes without --output: the environment's own data folder, as `kedro run --env` writes it."""
    from rlvr_factory.config_loader import data_root

    return f"{data_root(env)}/{REPORT}"


def run(args: argparse.Namespace) -> int:
    """Build the domain and its tasks, audit them, print the table, write the report; 1 if anything paid."""
    from rlvr_factory.audit import AuditConfig, audit, write_report
    from rlvr_factory.audit.plot import plot_reward_audit
    from rlvr_factory.domains import get_domain, source_rows
    from rlvr_factory.domains.curation import members, validate
    from rlvr_factory.schema import parse
    from rlvr_factory.verification import VerifyConfig

    if args.tasks is not None and args.tasks < 1 or args.workers is not None and args.workers < 1:
        raise AuditUsageError("--tasks and --workers must be at least 1")
    parameters = domain_parameters(args)
    try:
        domain = get_domain(parameters["domain"])
    except (ValueError, TypeError) as e:
        raise AuditUsageError(f"the domain cannot be built: {e}") from None
    tasks, _ = validate(source_rows(domain), members(domain))
    if not tasks:
        raise AuditUsageError("the domain has no valid tasks to attack")
    config = AuditConfig(**{**parameters["curate"]["audit"], **({"tasks_per_group": args.tasks} if args.tasks else {})})
    verify = parse(VerifyConfig, {**parameters["verify"], **({"workers": args.workers} if args.workers else {})}, "verify")
    output = args.output or default_output(None if args.domain else args.env or os.environ.get("KEDRO_ENV"))
    report = audit(domain, tasks, verify, config)
    print(report.table())
    if output != "-":
        write_report(report, output)
        picture = Path(output).with_suffix(".png")
        plot_reward_audit(report.to_json()).savefig(picture, dpi=100)
        print(f"report: {output}, {picture}")
    return 1 if report.failing else 0


def main(argv: list[str] | None = None) -> int:
    """`rlvr audit` on its own (console.py registers the same subcommand)."""
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except AuditUsageError as e:
        print(f"rlvr audit: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["AuditUsageError", "add_domain_options", "add_parser", "domain_parameters", "main", "run", "runtime_params"]
