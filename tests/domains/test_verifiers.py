"""`domain.name: verifiers` without verifiers installed: tasks are taskset positions split by a seeded shuffle,
the configuration errors say what to do, a run without the install says how to install it, and a `vf-eval` that
fails gives `infra_error` episodes, never a wrong answer. (The runs against the real verifiers are in
tests/pipelines/test_verifiers_rlvr.py, in the verifiers venv's CI step.)"""

from __future__ import annotations

import pytest
import torch

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.verifiers import VerifiersDomain
from rlvr_factory.pipelines.sft.nodes import supervised_fine_tune
from rlvr_factory.parameters import ModelConfig, SFTBlockConfig
from rlvr_factory.rollout.agent_loop import RolloutConfig, sample_episodes
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.rollout.verifiers_adapter import VerifiersRunError
from tests.conftest import make_tiny_policy


def test_tasks_are_the_tasksets_positions_shuffled_by_seed_into_the_splits():
    domain = VerifiersDomain(splits={"train": 6, "validation": 2, "test": 3}, seed=4)
    tasks = domain.generate_tasks()
    positions = [domain.position(t) for t in tasks]
    assert sorted(positions) == list(range(11))
    assert [t.split for t in tasks] == ["train"] * 6 + ["validation"] * 2 + ["test"] * 3
    assert positions != list(range(11))  # shuffled
    assert [t.reference for t in VerifiersDomain(splits=domain.splits, seed=4).generate_tasks()] == [t.reference for t in tasks]
    assert [t.reference for t in VerifiersDomain(splits=domain.splits, seed=5).generate_tasks()] != [t.reference for t in tasks]
    assert len({t.task_id for t in tasks}) == 11 and tasks[0].prompt == f"sums task {positions[0]}"


def test_the_block_is_checked_and_what_verifiers_lacks_is_named():
    assert isinstance(get_domain({"name": "verifiers", "env_id": "sums", "env_args": ["--env.taskset.seed", "3"]}),
                      VerifiersDomain)
    with pytest.raises(ValueError, match="splits"):
        VerifiersDomain(splits={"train": 0})
    with pytest.raises(ValueError, match="max_concurrent"):
        VerifiersDomain(max_concurrent=0)
    domain = VerifiersDomain()
    task = domain.generate_tasks()[0]
    with pytest.raises(ValueError, match="sft.num_examples: 0"):
        domain.demonstration(task)
    with pytest.raises(ValueError, match="model.name_or_path"):
        domain.pretraining_corpus(10, 0, set())
    with pytest.raises(ValueError, match="not as a member of a mix"):
        domain.environment()
    assert domain.score("12", task.reference).status == "error"  # a completion alone has no verdict here


def test_a_run_without_verifiers_installed_says_how_to_install_it(tmp_path):
    policy = make_tiny_policy()
    domain = VerifiersDomain(venv=str(tmp_path / "no-venv"))
    with pytest.raises(VerifiersRunError, match="scripts/install_verifiers.sh"):
        sample_episodes(policy, domain, domain.generate_tasks()[:2], 2, RolloutConfig(), SamplingConfig(max_new_tokens=4))


def test_a_vf_eval_that_fails_gives_infra_error_episodes_naming_its_output(tmp_path):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vf-eval").write_text("#!/bin/sh\necho 'environment sums crashed at import' >&2\nexit 3\n")
    (bin_dir / "vf-eval").chmod(0o755)
    policy = make_tiny_policy()
    domain = VerifiersDomain(venv=str(tmp_path / "venv"))
    tasks = domain.generate_tasks()[:3]
    episodes, stats = sample_episodes(policy, domain, tasks, 2, RolloutConfig(), SamplingConfig(max_new_tokens=4))
    assert [(e.task_index, e.sample_index) for e in episodes] == [(k, s) for k in range(3) for s in range(2)]
    assert {e.score.status for e in episodes} == {"infra_error"}
    assert all("exit status 3" in e.error and "crashed at import" in e.error for e in episodes)
    assert stats["verifiers_errors"] == 6


def test_sft_with_no_examples_leaves_the_base_model_as_it_is(tmp_path):
    base = make_tiny_policy()
    base.model.save_pretrained(tmp_path / "base")
    base.tokenizer.save_pretrained(tmp_path / "base")
    policy, curve = supervised_fine_tune({"name_or_path": str(tmp_path / "base")}, None, ModelConfig(),
                                         SFTBlockConfig(num_examples=0), RolloutConfig())
    assert curve == {}
    for (name, ours), theirs in zip(policy.model.state_dict().items(), base.model.state_dict().values()):
        assert torch.equal(ours, theirs), name


def test_the_reward_audit_lists_the_environment_as_not_audited_never_as_ok():
    from rlvr_factory.audit import AuditConfig, audit
    from rlvr_factory.verification import VerifyConfig

    domain = VerifiersDomain()
    report = audit(domain, domain.generate_tasks(), VerifyConfig(), AuditConfig(tasks_per_group=4))
    (result,) = report.to_json()["results"]
    assert result["not_audited"] and sum(result["tried"].values()) == 0 and not report.failing
    assert "verifiers" in report.table() and "not audited: the environment judges its own traces" in report.table()
