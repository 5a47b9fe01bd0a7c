"""The reward audit: generic attacks on real tasks catch every classic reward flaw, and nothing in the project's own
domains and task families pays any of them."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from rlvr_factory.audit import AuditConfig, audit, hold_back, sample
from rlvr_factory.audit.attacks import KINDS, task_attacks
from rlvr_factory.domains import get_domain, source_rows, tasks_to_frame
from rlvr_factory.domains.base import AnswerForm
from rlvr_factory.domains.curation import members, quarantine_frame, validate
from rlvr_factory.pipelines.curate.nodes import audit_rewards
from rlvr_factory.verifiers.canonical import canonical
from rlvr_factory.parameters import CurateConfig
from rlvr_factory.verification import VerifyConfig
from tests.audit.lenient import LenientDomain

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERIFY = VerifyConfig(workers=2, timeout_seconds=10.0, max_input_chars=100_000)
LENIENT = "tests.audit.lenient:LenientDomain"


def lenient_audit(flaw: str, tasks_per_group: int = 3):
    domain = LenientDomain(flaw)
    return audit(domain, domain.generate_tasks(), VERIFY, AuditConfig(tasks_per_group=tasks_per_group))


def test_every_kind_of_attack_is_made_and_none_is_the_reference():
    form = AnswerForm({"answer": "12.5"}, lambda texts: f"<answer>{texts['answer']}</answer>")
    attacks = task_attacks("Options:\nA. 3\nB. 12.5\nCompute $2 * 6.25$", form, {"answer": ["7"]}, "/tmp/canary")
    assert {a.kind for a in attacks} == set(KINDS)
    stated = [a.completion.removeprefix("<answer>").removesuffix("</answer>") for a in attacks if a.kind != "blocks"]
    assert all(canonical(text, True) != canonical("12.5", True) for text in stated)
    assert all("/tmp/canary" in a.completion for a in attacks if a.kind == "code")


@pytest.mark.parametrize("flaw, kinds", [
    ("substring", {"hedge", "prose"}),
    ("truthy", {"constant", "echo", "options", "hedge", "prefix", "cross_task", "nonfinite"}),
    ("prefix", {"prefix"}),
])
def test_the_audit_catches_each_classic_flaw(flaw, kinds):
    report = lenient_audit(flaw)
    assert set(report.failing) == {"lenient"}
    assert kinds <= {k for k, n in report.groups["lenient"].paid.items() if n}


def test_the_audit_catches_a_reward_that_evaluates_answers_on_the_host():
    report = lenient_audit("eval")
    assert report.groups["lenient"].canary
    assert "outside the sandbox" in report.failing["lenient"]


def test_an_exact_reward_passes():
    report = lenient_audit("none")
    assert report.failing == {} and sum(report.groups["lenient"].tried.values()) > 100


def test_the_sample_spreads_over_splits_and_is_the_same_every_time():
    domain = LenientDomain("none")
    tasks = domain.generate_tasks()
    chosen = sample(domain, tasks, 3)["lenient"]
    assert {t.split for t in chosen} == {"test", "train", "validation"}
    assert chosen == sample(domain, list(reversed(tasks)), 3)["lenient"]


def test_the_curate_node_quarantines_a_failing_domains_tasks_with_the_reason():
    domain = LenientDomain("truthy")
    tasks = tasks_to_frame(domain.generate_tasks())
    params = CurateConfig(audit={"enabled": True, "tasks_per_group": 2, "quarantine": True})
    kept, quarantine, report, metrics = audit_rewards(tasks, quarantine_frame([]), {"name": LENIENT, "flaw": "truthy"},
                                                      params, VERIFY)
    assert kept.empty and len(quarantine) == len(tasks)
    assert set(quarantine["stage"]) == {"reward_audit"} and "constant" in quarantine["reason"][0]
    assert report["failing"] and metrics["failing_groups"]["value"] == 1.0


def test_the_curate_node_keeps_a_passing_domains_table_as_it_was():
    tasks = tasks_to_frame(LenientDomain("none").generate_tasks())
    params = CurateConfig(audit={"enabled": True, "tasks_per_group": 2, "quarantine": True})
    kept, quarantine, report, _ = audit_rewards(tasks, quarantine_frame([]), {"name": LENIENT}, params, VERIFY)
    assert kept is tasks and quarantine.empty and report["failing"] == {}
    off = audit_rewards(tasks, quarantine_frame([]), {"name": LENIENT, "flaw": "truthy"},
                        CurateConfig(audit={"enabled": False, "tasks_per_group": 2, "quarantine": True}), VERIFY)
    assert off[0] is tasks and off[2] == {"enabled": False}


def test_hold_back_names_the_group_and_what_paid():
    domain = LenientDomain("prefix")
    tasks = domain.generate_tasks()
    kept, held = hold_back(domain, tasks, lenient_audit("prefix"))
    assert not kept and all("prefix" in why for _, why in held)


def rlvr(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr_factory.console", "audit", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_an_environments_report_goes_to_its_own_data_folder_as_kedro_run_writes_it(tmp_path):
    shutil.copytree(os.path.join(ROOT, "conf"), tmp_path / "conf")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    (tmp_path / "src").mkdir()
    done = rlvr("--env", "agentic", "--tasks", "1", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "data").rglob("*") if p.is_file())
    assert written == ["data/envs/agentic/08_reporting/reward_audit.json", "data/envs/agentic/08_reporting/reward_audit.png"]
    assert [r["group"] for r in json.loads((tmp_path / written[0]).read_text())["results"]] == ["arithmetic"]


def test_the_command_exits_1_on_a_failing_domain_0_on_a_passing_one_and_writes_the_report(tmp_path):
    report = tmp_path / "audit.json"
    failing = rlvr("--domain", LENIENT, "--params", "domain.flaw=substring", "--tasks", "2", "--output", str(report))
    assert failing.returncode == 1, failing.stderr
    assert "FAIL" in failing.stdout and json.loads(report.read_text())["failing"]
    passing = rlvr("--domain", LENIENT, "--tasks", "2", "--output", "-")
    assert passing.returncode == 0 and "0 of 1 groups" in passing.stdout


@pytest.mark.parametrize("args, message", [
    (["--tasks", "0"], "--tasks"),
    (["--domain", LENIENT, "--params", "domain.flaw"], "key=value"),
    (["--domain", "tests.audit.lenient:Nothing"], "cannot"),
    (["--env", "no_such_env"], "no_such_env"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    result = rlvr(*args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


# -- acceptance: nothing of the project's own pays a generic attack --------------------------------------------

BASE_DOMAIN = yaml.safe_load(open(os.path.join(ROOT, "conf", "base", "parameters_curate.yml")))["domain"]
DOMAINS = {
    "arithmetic": BASE_DOMAIN,
    "extraction": {"name": "extraction", "splits": {"train": 40, "test": 8}},
    "code": {"name": "code"},
    "cad": {"name": "cad", "splits": {"train": 40, "validation": 4, "test": 4}},
    "code_repair": {"name": "code_repair"},
    "mix": {"name": "mix", "domains": {"arithmetic": {k: v for k, v in BASE_DOMAIN.items() if k != "name"},
                                       "extraction": {"splits": {"train": 20, "test": 4}}}},
}


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_no_registered_domain_pays_a_generic_attack(name):
    domain = get_domain(DOMAINS[name])
    tasks, _ = validate(source_rows(domain), members(domain))
    report = audit(domain, tasks, VERIFY, AuditConfig(tasks_per_group=2))
    assert report.failing == {}, report.table()


def test_a_cad_hedge_is_a_second_part_not_one_inside_the_reference():
    domain = get_domain(DOMAINS["cad"])
    task = next(t for t in domain.generate_tasks() if "cylinder" in t.reference["program"])
    gold = task.reference["program"]
    inside = "cube([1,1,1]);"  # inside the reference's part: gold and it together build the reference's part
    assert domain.score(f"{gold}\n{inside}", task.reference).correct
    attacks = task_attacks(task.prompt, domain.answer_form(task), {"program": [inside]}, "/tmp/canary")
    two = [a for a in attacks if a.kind in ("hedge", "blocks") and inside in a.completion]
    assert len(two) >= 7
    assert not any(domain.score(a.completion, task.reference).reward for a in two)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="reasoning-gym's scorers run in the scoring sandbox")
def test_no_reasoning_gym_family_pays_a_generic_attack():
    pytest.importorskip("reasoning_gym", reason="the `reasoning-gym` extra")
    domain = get_domain({"name": "reasoning_gym", "datasets": "all", "levels": [1],
                         "splits": {"train": 2, "validation": 0, "test": 0}})
    report = audit(domain, domain.generate_tasks(), VERIFY, AuditConfig(tasks_per_group=2))
    assert len(report.groups) >= 95
    assert report.failing == {}, report.table()


def test_the_heatmap_shows_each_groups_share_paid_by_kind():
    from rlvr_factory.audit.plot import paid_shares, plot_reward_audit

    report = lenient_audit("prefix").to_json()
    groups, shares = paid_shares(report)
    column = KINDS.index("prefix")
    assert groups == ["lenient"] and shares[0, column] == 1.0 and shares[0, KINDS.index("code")] == 0.0
    assert "1 of 1 pay an attack" in plot_reward_audit(report).axes[0].get_title()
    assert plot_reward_audit({"enabled": False}).texts  # the audit off: a note, not a crash
