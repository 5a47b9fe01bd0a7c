"""A run's summary for people: one line per RL round with the run's ETA, the final table of
results, and the small metrics file `dvc exp show` tabulates. Plain functions over the stats
and reports the stages return; knows nothing about Kedro."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

STAGES = (("sft", "SFT"), ("rl", "RL"))  # report key, row label


def duration(seconds: float) -> str:
    """A short human duration: `8.2 s`, `45 s`, `3m05s`, `1h02m`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@dataclass
class RoundClock:
    """Wall-clock seconds of the RL rounds finished so far, and what is left of the run.

    `pending_seconds` is work after the rounds whose cost is already known (e.g. the RL
    policy's evaluation, measured on the SFT policy's).
    """

    rounds: int
    finished: list[float] = field(default_factory=list)
    pending_seconds: float = 0.0

    def finish(self, seconds: float) -> None:
        """Record one more finished round."""
        self.finished.append(seconds)

    def eta(self) -> float:
        """Seconds left: the remaining rounds at the mean pace so far, plus the pending work."""
        if not self.finished:
            raise ValueError("no round has finished yet; the ETA needs at least one")
        remaining = max(0, self.rounds - len(self.finished))
        return remaining * sum(self.finished) / len(self.finished) + self.pending_seconds


def round_line(stats: Mapping[str, float], rounds: int, seconds: float, eta: float, with_reference: bool) -> str:
    """One round's story in one line: reward, pass rate, validation accuracy, KL, entropy, time
    (`rounds`: how many the run's configuration has; rounds count from 1).

    KL is the divergence from the reference policy when the run has one (`rl.update.kl_coef`
    > 0), else the update's own step (`policy_drift_kl`, the old policy against the new one).
    """
    kl = f"KL(ref) {stats['kl']:.4f}" if with_reference else f"KL(step) {stats['policy_drift_kl']:.4f}"
    return (
        f"round {stats['round'] + 1:>{len(str(rounds))}}/{rounds}: reward {stats['reward_mean']:.3f}, "
        f"pass rate {stats['pass_rate']:.3f}, val acc {stats['val_greedy_accuracy']:.3f}, {kl}, "
        f"entropy {stats['entropy']:.3f}; {duration(seconds)}, ETA {duration(eta)}"
    )


def _k(report: Mapping) -> int:
    """The k of the report's pass@k (the largest sampled k)."""
    ks = [int(m.group(1)) for key in report for m in [re.fullmatch(r"pass@(\d+)", key)] if m]
    if not ks:
        raise ValueError("the evaluation report has no pass@k; was it written by `evaluate`?")
    return max(ks)


def _domains(report: Mapping) -> list[str]:
    return sorted({m.group(1) for key in report for m in [re.fullmatch(r"greedy_accuracy/domain_([^/]+)", key)] if m})


def _repair_turns(report: Mapping) -> int | None:
    """The max_turns of a code-repair report's `repair@<n>turns` (None: not a code-repair report)."""
    found = [int(m.group(1)) for key in report for m in [re.fullmatch(r"repair@(\d+)turns", key)] if m]
    return max(found) if found else None


def _repair_line(eval_report: Mapping, turns: int) -> str:
    cells = [f"{label} {100 * eval_report[stage]['repair@1turn']:.1f}% -> {100 * eval_report[stage][f'repair@{turns}turns']:.1f}%"
             for stage, label in STAGES]
    return f"repair rate, first edit -> within {turns} turns (test split): " + ", ".join(cells)


def _cell(report: Mapping, key: str) -> str:
    return f"{100 * report[key]:.1f}%" if key in report else "-"


def results_table(eval_report: Mapping) -> str:
    """SFT against RL on the test split (greedy, pass@1, pass@k, maj@k), overall and per domain
    when there are several, for code repair the repair rates with the first edit and within
    `max_turns`, then the validation curve in one line."""
    rl = eval_report["rl"]
    k = _k(rl)
    metrics = ["greedy_accuracy", "pass@1", f"pass@{k}", f"maj@{k}"]
    header = ["test split", "tasks", "greedy", "pass@1", f"pass@{k}", f"maj@{k}"]
    rows = []
    domains = _domains(rl)
    groups = [("", "")] + ([(f"{d}: ", f"/domain_{d}") for d in domains] if len(domains) > 1 else [])
    for prefix, suffix in groups:
        for stage, label in STAGES:
            report = eval_report[stage]
            title = f"RL ({eval_report['rounds']} rounds)" if stage == "rl" and not prefix else label
            rows.append([prefix + title, f"{int(report[f'num_tasks{suffix}'])}",
                         *(_cell(report, metric + suffix) for metric in metrics)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in [header, *rows]]
    turns = _repair_turns(rl)
    if turns is not None:
        lines.append(_repair_line(eval_report, turns))
    curve = [r["val_greedy_accuracy"] for r in eval_report["round_history"]]
    best = max(range(len(curve)), key=curve.__getitem__)
    lines.append(f"validation greedy accuracy: {100 * curve[0]:.1f}% after 1 round, {100 * curve[-1]:.1f}% after "
                 f"{len(curve)} (best: {100 * curve[best]:.1f}% after {best + 1})")
    return "\n".join(lines)


def summary_metrics(eval_report: Mapping, sft_val_greedy_accuracy: float) -> dict:
    """The headline numbers, small enough for one row of `dvc exp show`: test greedy accuracy and
    pass@k of both policies, validation accuracy (SFT, best round, last round), for code repair both
    policies' repair rates with the first edit and within `max_turns`, and, when the run trains
    several domains, the RL policy's test greedy accuracy per domain."""
    k = _k(eval_report["rl"])
    curve = [r["val_greedy_accuracy"] for r in eval_report["round_history"]]
    metrics = {
        "greedy": {stage: eval_report[stage]["greedy_accuracy"] for stage, _ in STAGES},
        f"pass@{k}": {stage: eval_report[stage][f"pass@{k}"] for stage, _ in STAGES},
        "val": {"sft": float(sft_val_greedy_accuracy), "best": max(curve), "last": curve[-1]},
    }
    turns = _repair_turns(eval_report["rl"])
    if turns is not None:
        metrics["repair"] = {key: {stage: eval_report[stage][f"repair@{key}"] for stage, _ in STAGES}
                             for key in ("1turn", f"{turns}turns")}
    domains = _domains(eval_report["rl"])
    if len(domains) > 1:
        metrics["rl_greedy_by_domain"] = {d: eval_report["rl"][f"greedy_accuracy/domain_{d}"] for d in domains}
    return metrics


def artefact_lines(paths: Sequence[tuple[str, str]]) -> str:
    """`what   where` lines, aligned."""
    width = max(len(what) for what, _ in paths)
    return "\n".join(f"  {what.ljust(width)}  {where}" for what, where in paths)
