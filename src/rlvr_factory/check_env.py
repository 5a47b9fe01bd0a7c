"""`rlvr check-env`: the environment conformance kit (conformance.py) on the project's domain or any registered one.

    rlvr check-env                                  # the run's domain (conf/base), as `kedro run` would build it
    rlvr check-env --env textarena                  # an environment's domain
    rlvr check-env --domain my_pkg.games:MyDomain --params domain.level=2

It prints one row per property (pass or FAIL, and what was seen) and exits 1 when any fails; 2 for bad
arguments or a domain that cannot be built.
"""

from __future__ import annotations

import argparse
from typing import Any

from rlvr_factory.audit.command import AuditUsageError, add_domain_options, domain_parameters


def add_parser(commands: Any) -> None:
    """The `check-env` subcommand and its options."""
    check = commands.add_parser("check-env", help="check that a domain's environment meets the conformance kit",
                                description=__doc__.split("\n\n")[0])
    add_domain_options(check, "checked")
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
    parameters = domain_parameters(args)
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
