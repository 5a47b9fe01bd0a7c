"""`rlvr check-env`: the environment conformance kit (conformance.py) on the project's domain or any registered one.

    rlvr check-env                                  # the run's domain (conf/base), as `kedro run` would build it
    rlvr check-env --env textarena                  # an environment's domain
    rlvr check-env --domain my_pkg.games:MyDomain --params domain.level=2

It prints one row per property (pass or FAIL, and what was seen) and exits 1 when any fails; 2 for bad
arguments or a domain that cannot be built.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from rlvr_factory.audit.command import AuditUsageError, project_parameters, resolved, runtime_params


def add_parser(commands: Any) -> None:
    """The `check-env` subcommand and its options."""
    check = commands.add_parser("check-env", help="check that a domain's environment meets the conformance kit",
                                description=__doc__.split("\n\n")[0])
    where = check.add_mutually_exclusive_group()
    where.add_argument("--env", default=None, help="the configuration environment whose domain is checked (conf/ENV)")
    where.add_argument("--domain", default=None, help="check this registered domain (or module:attr) with its defaults")
    check.add_argument("--params", default="", help="runtime parameters as `kedro run` takes them (a.b=1,c=x)")
    check.add_argument("--tasks", type=int, default=2, help="tasks the tokens check plays (the first two play the rest)")
    check.add_argument("--turns", type=int, default=None, help="actions per episode (default: rollout.max_turns)")
    check.add_argument("--timeout", type=float, default=30.0, help="seconds one environment call may take")
    check.add_argument("--no-tokens", action="store_true", help="skip the tokens check (no model is built)")
    check.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the domain and its tasks, run the kit, print the table; 1 if any property failed."""
    from rlvr_factory.domains import get_domain
    from rlvr_factory.conformance import check_environment, table

    if args.tasks < 2 or args.turns is not None and args.turns < 1 or args.timeout <= 0:
        raise AuditUsageError("--tasks must be at least 2, --turns at least 1 and --timeout positive")
    if args.domain is not None:
        given = runtime_params(args.params)
        given["domain"] = {**(given.get("domain") or {}), "name": args.domain}
        parameters = resolved(given)
    else:
        parameters = project_parameters(args.env or os.environ.get("KEDRO_ENV"), runtime_params(args.params))
    try:
        domain = get_domain(parameters["domain"])
    except (ValueError, TypeError, ImportError) as e:
        raise AuditUsageError(f"the domain cannot be built: {e}") from None
    tasks = domain.generate_tasks()[: args.tasks]
    if len(tasks) < 2:
        raise AuditUsageError(f"the domain has {len(tasks)} valid task(s); the kit needs 2")
    checks = check_environment(domain, tasks, args.turns or parameters["rollout"]["max_turns"], args.timeout,
                               tokens=not args.no_tokens)
    print(table(checks))
    return 0 if all(c.passed for c in checks) else 1
