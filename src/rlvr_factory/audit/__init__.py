"""The reward audit: attack every domain and task family with generic attacks on its real tasks, and report what paid.

    report = audit(domain, tasks, verify_settings, AuditConfig(tasks_per_group=4))
    print(report.table())            # one row per domain or family: attacks tried, paid, what paid
    report.failing                   # {group: why}: the groups whose reward pays an attack
    report.to_json()                 # data/08_reporting/reward_audit.json, an MLflow artifact

A group is a domain, or each member of a domain that has members (every reasoning-gym family, every domain of a
mix). For each group the audit takes `tasks_per_group` of its tasks (spread over its splits and levels, the
same tasks every run) and states every attack of `attacks.task_attacks` the way the domain reads answers (`answer_form`),
then scores them all through the run's own verification path (`verification.verify_batch`: the verifier pool,
the scoring sandbox). A domain's `shared_solutions` names groups where one task's solution can solve another:
they get no cross-task attack; nor does a task from another with the same numbers in its prompt (it may well
be the same problem: `puzzle24`'s four numbers, `jugs`' capacities and target). A domain with a `shaped_reward` (a reason: CAD's volume IoU pays overlap by design;
a learned reward model scores any text)
fails an attack only when the attack is judged correct. An attack is *paid* when its outcome (the breakdown's `outcome`, else the reward) is
above 0 (for `prose`, when it is above 0 and below 1: credit for length). In a game (`chance_wins`, a reason: a
guess that happens to be right wins GuessTheNumber) a move may win by chance: such a group fails only when one
attack wins on more than half its tasks (and at least two), a universal move. A code attack that left its canary
file on this host means something evaluated model output outside the sandbox. A group fails when anything
was paid or a canary appeared; the curate stage quarantines a failing group's tasks (`curate.audit`). A domain
whose reward cannot be attacked from here (`not_audited`, a reason: a `verifiers` environment judges its own
traces, inside `vf-eval`) is listed as not audited, never as ok.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm

from rlvr_factory.audit.attacks import KINDS, PARTIAL_ONLY, Attack, same_problem_numbers, task_attacks
from rlvr_factory.domains.base import AnswerForm, Domain, Task
from rlvr_factory.schema import PositiveInt
from rlvr_factory.verifiers.score import Score

if TYPE_CHECKING:
    from rlvr_factory.verification import VerifyConfig

log = logging.getLogger(__name__)

FULL = 1.0 - 1e-9
EXAMPLE_CHARS = 120


@dataclass(frozen=True)
class AuditConfig:
    enabled: bool = True  # attack every domain and family's reward before the run (rlvr audit; curate's audit_rewards)
    tasks_per_group: PositiveInt = 4  # tasks attacked per domain or task family (spread over splits and levels)
    quarantine: bool = True  # hold back the tasks of every domain or family whose reward pays an attack


@dataclass
class GroupResult:
    """What the audit found for one domain or family."""

    group: str
    tasks: int = 0
    tried: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # kind -> attacks scored
    paid: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # kind -> attacks paid
    examples: list[dict[str, Any]] = field(default_factory=list)  # the first paid attacks, with what they earned
    statuses: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # verdict status -> count
    canary: bool = False  # a code attack wrote its canary on the host
    chance: bool = False  # a move may win by chance (a game): only an attack that wins most tasks fails the group
    won: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # attack name -> tasks it was paid on
    not_audited: str = ""  # why the group's reward could not be attacked (then no attack was tried)

    @property
    def failed(self) -> bool:
        return self.canary or (bool(self.universal) if self.chance else any(self.paid.values()))

    @property
    def universal(self) -> list[str]:
        """The attacks paid on more than half the group's tasks (at least two): no chance win, in a game."""
        return sorted(name for name, ids in self.won.items() if len(ids) >= 2 and 2 * len(ids) > self.tasks)

    def why(self) -> str:
        """One line: what paid, with the first example."""
        if self.canary:
            return "model output was evaluated outside the sandbox (a code attack wrote its canary on the host)"
        if self.chance:
            return f"attacks win on most tasks, beyond a chance win: {', '.join(self.universal)}"
        kinds = ", ".join(f"{k} {n}/{self.tried[k]}" for k, n in sorted(self.paid.items()) if n)
        first = self.examples[0] if self.examples else {}
        return f"pays generic attacks ({kinds}); e.g. {first.get('attack')} earned {first.get('outcome')}"

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "tasks": self.tasks, "failed": self.failed, "canary": self.canary,
                "tried": dict(self.tried), "paid": {k: v for k, v in self.paid.items() if v},
                "statuses": dict(self.statuses), "examples": self.examples, "why": self.why() if self.failed else "",
                **({"not_audited": self.not_audited} if self.not_audited else {})}


@dataclass
class AuditReport:
    """Every group's result, and the audit's settings and time."""

    groups: dict[str, GroupResult]
    tasks_per_group: int
    seconds: float = 0.0

    @property
    def failing(self) -> dict[str, str]:
        """{group: why} for every group whose reward paid an attack."""
        return {name: g.why() for name, g in sorted(self.groups.items()) if g.failed}

    def to_json(self, timed: bool = True) -> dict[str, Any]:
        """The report as JSON; `timed=False` leaves out the seconds it took (a pipeline output is the same bytes
        every run of a commit)."""
        tried = sum(sum(g.tried.values()) for g in self.groups.values())
        return {"tasks_per_group": self.tasks_per_group, "groups": len(self.groups), "attacks": tried,
                "failing": self.failing, **({"seconds": round(self.seconds, 1)} if timed else {}),
                "results": [g.as_json() for _, g in sorted(self.groups.items())]}

    def table(self) -> str:
        """A plain-text table: one row per group, the attacks it paid by kind."""
        lines = [f"{'group':28} {'tasks':>5} {'attacks':>7} {'paid':>5}  verdict"]
        for name, g in sorted(self.groups.items()):
            paid = sum(g.paid.values())
            verdict = "FAIL: " + g.why() if g.failed else f"not audited: {g.not_audited}" if g.not_audited else "ok"
            lines.append(f"{name[:28]:28} {g.tasks:5d} {sum(g.tried.values()):7d} {paid:5d}  {verdict}")
        lines.append(f"{len(self.failing)} of {len(self.groups)} groups pay an attack; "
                     f"{sum(sum(g.tried.values()) for g in self.groups.values())} attacks in {self.seconds:.0f} s")
        return "\n".join(lines)


def answer_form(domain: Domain, task: Task) -> AnswerForm:
    """How `domain` states answers for `task`: its `state_answer`/`answer_slots` when it has them, else one slot
    holding `reference["answer"]`, stated by putting the text in the answer-only demonstration in its place."""
    own = getattr(domain, "answer_form", None)
    if callable(own):
        return own(task)
    answer = task.reference.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        return AnswerForm({"answer": None}, lambda texts: texts["answer"])
    demonstration = domain.demonstration(task, worked=False)
    if answer not in demonstration:
        return AnswerForm({"answer": answer}, lambda texts: texts["answer"])
    head, _, tail = demonstration.rpartition(answer)
    return AnswerForm({"answer": answer}, lambda texts: f"{head}{texts['answer']}{tail}")


def group_of(domain: Domain, task: Task) -> str:
    """The audit group of a task: its family or member domain when the domain has members, else the domain."""
    return task.domain if hasattr(domain, "members") else domain.name


def sample(domain: Domain, tasks: Sequence[Task], per_group: int) -> dict[str, list[Task]]:
    """`per_group` tasks of each group, spread evenly over its tasks ordered by split, difficulty and task id
    (so every level and split is attacked, and the same tasks every run)."""
    groups: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: (t.split, t.difficulty, t.task_id)):
        groups[group_of(domain, task)].append(task)
    return {name: _spread(group, per_group) for name, group in sorted(groups.items())}


def _spread(items: list[Task], count: int) -> list[Task]:
    """`count` items evenly spaced over `items` (all of them when there are no more)."""
    if len(items) <= count:
        return items
    return [items[round(i * (len(items) - 1) / max(count - 1, 1))] for i in range(count)]


def _planned(domain: Domain, chosen: Mapping[str, list[Task]], canaries: Mapping[str, Path]
             ) -> list[tuple[str, Task, Attack]]:
    """(group, task, attack) for every attack on every chosen task (each group's code attacks name its canary)."""
    planned = []
    shared = getattr(domain, "shared_solutions", {})
    for group, tasks in chosen.items():
        canary = str(canaries[group])
        forms = {t.task_id: answer_form(domain, t) for t in tasks}
        for task in tasks:
            others = defaultdict(list)
            for other in tasks:
                if other is not task and not same_problem_numbers(task.prompt, other.prompt):
                    for slot, gold in forms[other.task_id].slots.items():
                        if gold:
                            others[slot].append(gold)
            attacks = task_attacks(task.prompt, forms[task.task_id], others, canary)
            planned += [(group, task, a) for a in attacks if not (a.kind == "cross_task" and group in shared)]
    return planned


Judge = Callable[[Domain, Sequence[str], Sequence[dict[str, Any]], "VerifyConfig"], tuple[list[Score], dict]]


def audit(domain: Domain, tasks: Sequence[Task], verify: VerifyConfig, config: AuditConfig,
          judge: Judge | None = None) -> AuditReport:
    """Attack `tasks`' groups and report what paid (see the module docstring); `judge` scores completions
    (default: `verification.verify_batch`, the run's own path)."""
    if judge is None:
        from rlvr_factory.verification import verify_batch as judge
    started = time.monotonic()
    chosen = sample(domain, tasks, config.tasks_per_group)
    chance = getattr(domain, "chance_wins", None) is not None
    results = {name: GroupResult(name, tasks=len(group), chance=chance) for name, group in chosen.items()}
    exempt = getattr(domain, "not_audited", None)
    if exempt:
        log.warning("reward audit: domain %s is not audited: %s", domain.name, exempt)
        for result in results.values():
            result.not_audited = exempt
        return AuditReport(results, config.tasks_per_group, time.monotonic() - started)
    scratch = Path(tempfile.mkdtemp(prefix="rlvr-audit-"))
    canaries = {name: scratch / f"canary-{i}" for i, name in enumerate(chosen)}
    shaped = getattr(domain, "shaped_reward", None) is not None
    try:
        planned = _planned(domain, chosen, canaries)
        log.info("reward audit: %d attacks on %d tasks of %d groups", len(planned),
                 sum(map(len, chosen.values())), len(chosen))
        with tqdm(total=len(planned), desc="reward audit", unit="attack", disable=len(chosen) < 2) as bar:
            for name in chosen:
                mine = [(task, attack) for group, task, attack in planned if group == name]
                scores, _ = judge(domain, [a.completion for _, a in mine], [t.reference for t, _ in mine], verify)
                for (task, attack), score in zip(mine, scores, strict=True):
                    _record(results[name], task, attack, score, shaped)
                results[name].canary = canaries[name].exists()
                bar.update(len(mine))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return AuditReport(results, config.tasks_per_group, time.monotonic() - started)


def outcome_of(score: Score) -> float:
    """What an attack earned: the verdict's outcome component, else its reward (0 unless judged `ok`)."""
    if score.status != "ok":
        return 0.0
    value = score.breakdown.get("outcome", score.reward)
    return float(value) if not isinstance(value, str) else score.reward


def _record(result: GroupResult, task: Task, attack: Attack, score: Score, shaped: bool) -> None:
    """Count one scored attack in its group's result (with a `shaped` reward, only a verdict of correct pays)."""
    result.tried[attack.kind] += 1
    result.statuses[score.status] += 1
    earned = outcome_of(score)
    if shaped:  # a right answer in words (`prose`) is right: only its partial credit is a flaw, and shaped is partial
        paid = score.status == "ok" and score.correct and attack.kind not in PARTIAL_ONLY
    else:
        paid = 0 < earned < FULL if attack.kind in PARTIAL_ONLY else earned > 0
    if paid:
        result.paid[attack.kind] += 1
        result.won[attack.name].add(task.task_id)
        if len(result.examples) < 5:
            result.examples.append({"task_id": task.task_id, "attack": attack.name, "outcome": round(earned, 4),
                                    "completion": attack.completion[:EXAMPLE_CHARS]})


def hold_back(domain: Domain, tasks: Sequence[Task], report: AuditReport) -> tuple[list[Task], list[tuple[Task, str]]]:
    """The tasks of groups the audit passed, and each task of a failing group with the reason."""
    failing = report.failing
    kept, held = [], []
    for task in tasks:
        group = group_of(domain, task)
        if group in failing:
            held.append((task, f"the reward audit: the {group} reward {failing[group]}"))
        else:
            kept.append(task)
    return kept, held


def write_report(report: AuditReport, path: str | Path) -> None:
    """The report as JSON at `path`."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


__all__ = ["KINDS", "AnswerForm", "Attack", "AuditConfig", "AuditReport", "GroupResult", "answer_form", "audit",
           "hold_back", "outcome_of", "sample", "write_report"]
