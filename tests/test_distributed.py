"""Data-parallel training: two gloo processes, joined the way torchrun joins them (the `env://`
variables), train exactly as one process does on the same global batches."""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from rlvr_factory import distributed
from rlvr_factory.models.lora import LoraSettings, with_lora
from rlvr_factory.models.policy import Policy, load_policy, save_policy
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.training.sft import SFTConfig, encode_chat_examples, supervised_train
from tests.conftest import make_tiny_policy

WORLD = 2
SFT = SFTConfig(steps=3, batch_size=5, lr=3e-3, warmup_steps=1, seed=1)
# Two minibatches of uneven shares, micro-batches of 2 per rank, two epochs (so the old log-probs are
# computed, sharded), a KL term in the loss and DAPO's token-mean: every normaliser spans the minibatch.
# A third round in micro-batches of one row, where a group of equal rewards has no gradient: the ranks make
# different numbers of passes (under fsdp the short rank pads them), with activation checkpointing.
RL = [
    UpdateConfig(lr=5e-3, minibatch_size=7, micro_batch_size=2, epochs=2, kl_coef=0.1, seed=3),
    UpdateConfig(lr=5e-3, minibatch_size=12, loss_aggregation="seq-mean-token-mean", seed=4),
    UpdateConfig(lr=5e-3, minibatch_size=15, micro_batch_size=1, gradient_checkpointing=True, seed=5),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sft_examples(tokenizer) -> list:
    prompts = [f"{a}+{b}=" for a in range(3) for b in range(4)]
    answers = [str(a + b) * (1 + (a + b) % 3) for a in range(3) for b in range(4)]
    return encode_chat_examples(tokenizer, prompts, answers)


def _rl_samples(tokenizer) -> list[Sample]:
    samples = []
    for g in range(4):
        prompt = tokenizer(f"q{g}:", add_special_tokens=False)["input_ids"]
        for k in range(3):
            completion = tokenizer("ab"[k % 2] * (2 + k + g), add_special_tokens=False)["input_ids"]
            samples.append(Sample(f"t{g}", prompt, completion + [tokenizer.eos_token_id], float(k == g % 3) + 0.1 * g))
    prompt = tokenizer("q4:", add_special_tokens=False)["input_ids"]
    samples += [Sample("t4", prompt, tokenizer("c" * (k + 1), add_special_tokens=False)["input_ids"], 0.5) for k in range(3)]
    return samples


def train(out: Path) -> dict:
    """A few SFT steps, then one RL round under each of `RL`: the losses, the stats and the weights."""
    torch.manual_seed(0)
    policy = make_tiny_policy(seed=0)
    sft_losses = supervised_train(policy, _sft_examples(policy.tokenizer), SFT)
    reference = copy.deepcopy(policy.model)
    stats = [rl_update(policy, _rl_samples(policy.tokenizer), config, reference) for config in RL]
    between_rounds = policy.optimizer_state
    policy.optimizer_state = distributed.whole_optimizer_state(policy.optimizer_state)  # as a checkpoint round does
    if distributed.is_main():  # a checkpoint, as the RL loop writes one (rank 0), then every rank resumes from it
        save_policy(policy, out / "checkpoint", with_optimizer=True)
    distributed.barrier()
    resumed = load_policy(out / "checkpoint", device="cpu", with_optimizer=True)
    stats.append(rl_update(resumed, _rl_samples(policy.tokenizer), RL[1]))  # two steps: Adam's moments matter
    torch.manual_seed(1)  # the adapters' initial weights
    lora = Policy(with_lora(copy.deepcopy(policy.model), LoraSettings(enabled=True, r=4)), policy.tokenizer)
    stats.append(rl_update(lora, _rl_samples(policy.tokenizer), replace(RL[1], gradient_checkpointing=True)))  # LoRA
    result = {"sft_losses": sft_losses, "rl_stats": stats,
              "weights": {k: v.clone() for k, v in policy.model.state_dict().items()}
              | {f"lora/{k}": v.clone() for k, v in lora.model.state_dict().items() if "lora_" in k}
              | {f"resumed/{k}": v.clone() for k, v in resumed.model.state_dict().items()}}
    result["rollout"] = distributed.shard_run(_record_run)([9, 4, 7, 1, 3], 11)
    result["optimizer_keys"] = sorted(map(str, between_rounds["state"]))[:2]
    result["optimizer_local"] = sum(v.to_local().numel() if hasattr(v, "to_local") else v.numel()
                                    for values in between_rounds["state"].values() for v in values.values() if v.dim())
    result["checkpoint"] = out / "checkpoint"
    if distributed.sharded():
        whole = sum(p.numel() for p in policy.model.parameters())
        with distributed.training_copy(policy.model) as copy_:
            result["local_fraction"] = sum(p.to_local().numel() for p in copy_.parameters()) / whole
            shards = list(copy_.parameters())
        result["shards_left"] = sum(p.to_local().untyped_storage().nbytes() for p in shards)
    torch.save(result, out / f"rank{distributed.rank()}.pt")
    return result


def _rank_main(rank: int, port: int, out: Path, strategy: str) -> None:
    os.environ.update(WORLD_SIZE=str(WORLD), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    assert distributed.init(distributed.DistributedConfig(backend="gloo", strategy=strategy))
    try:
        train(out)
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def two_ranks(tmp_path_factory, request) -> list[dict]:
    out = tmp_path_factory.mktemp(request.param)
    mp.start_processes(_rank_main, args=(_free_port(), out, request.param), nprocs=WORLD, start_method="spawn")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> dict:
    return train(tmp_path_factory.mktemp("single"))


def test_one_process_rollouts_are_the_run_itself(one_process):
    episodes, _ = one_process["rollout"]
    assert [e.answer for e in episodes] == [f"{i}@11" for i in [9, 4, 7, 1, 3] for _ in range(2)]


def test_sft_losses_of_two_ranks_equal_one_process(two_ranks, one_process):
    for result in two_ranks:
        assert result["sft_losses"] == pytest.approx(one_process["sft_losses"], rel=1e-5)


def test_every_rank_reports_the_same_losses_and_stats_bit_for_bit(two_ranks):
    assert two_ranks[0]["sft_losses"] == two_ranks[1]["sft_losses"]
    assert two_ranks[0]["rl_stats"] == two_ranks[1]["rl_stats"]


def test_rl_update_stats_of_two_ranks_equal_one_process(two_ranks, one_process):
    for result in two_ranks:
        for got, want in zip(result["rl_stats"], one_process["rl_stats"]):
            assert got.keys() == want.keys()
            for key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key


def test_weights_after_sft_and_rl_equal_one_process_and_each_other(two_ranks, one_process):
    first = two_ranks[0]["weights"]
    for name, want in one_process["weights"].items():
        torch.testing.assert_close(first[name], want, rtol=1e-4, atol=1e-5, msg=name)  # Adam amplifies float32 sum-order noise
        assert torch.equal(two_ranks[1]["weights"][name], first[name]), f"ranks disagree on {name}"
    moved = sum(float((first[n] - w).abs().sum()) for n, w in make_tiny_policy(seed=0).model.state_dict().items())
    assert moved > 0.1  # the comparison is between trained weights, not two copies of the initial ones


def test_one_process_is_untouched_by_the_distributed_helpers():
    assert distributed.world_size() == 1 and distributed.rank() == 0 and distributed.is_main()
    assert distributed.shard(5) == slice(0, 5)
    assert distributed.rank_seed(17) == 17
    assert distributed.map_sharded(lambda xs: [x * 2 for x in xs], [1, 2]) == [2, 4]
    assert not distributed.init()


@pytest.mark.parametrize("n", [0, 1, 5, 8])
def test_shards_cover_every_item_once_in_order(monkeypatch, n):
    shares = []
    for r in range(3):
        monkeypatch.setattr(distributed, "world_size", lambda: 3)
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        shares.append(distributed.shard(n))
    assert [i for s in shares for i in range(n)[s]] == list(range(n))
    assert max(s.stop - s.start for s in shares) - min(s.stop - s.start for s in shares) <= 1


def test_rank_seeds_differ_per_rank_and_repeat(monkeypatch):
    seeds = []
    for r in range(3):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        seeds.append(distributed.rank_seed(5))
    assert len(set(seeds)) == 3 and seeds[0] == 5
    monkeypatch.setattr(distributed, "rank", lambda: 2)
    assert distributed.rank_seed(5) == seeds[2]
    assert [distributed.rank_seed(5, of_rank=r) for r in range(3)] == seeds  # another rank's, from any rank


def test_a_bad_configuration_names_the_key_and_the_allowed_values():
    with pytest.raises(ValueError, match="distributed.backend must be one of"):
        distributed.DistributedConfig(backend="mpi")
    with pytest.raises(ValueError, match="distributed.strategy must be one of \\('ddp', 'fsdp'\\)"):
        distributed.DistributedConfig(strategy="zero3")
    with pytest.raises(ValueError, match="set distributed.strategy: fsdp too"):
        distributed.DistributedConfig(cpu_offload=True)


def test_a_world_without_a_rendezvous_says_how_to_launch(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for key in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match="launch with torchrun"):
        distributed.init()


def _record_run(indices: list[int], seed: int) -> tuple[list[Episode], dict[str, float]]:
    """A rollout `run` that writes which prompt and seed made each episode into its answer."""
    episodes = [Episode(position, k, [index], answer=f"{index}@{seed}") for position, index in enumerate(indices)
                for k in range(2)]
    return episodes, {"engine_new_tokens": float(len(episodes))}


def test_sharded_rollouts_gather_every_group_in_order_with_per_rank_seeds(two_ranks):
    indices = [9, 4, 7, 1, 3]
    for result in two_ranks:
        episodes, stats = result["rollout"]
        assert [(e.task_index, e.sample_index, e.prompt_ids) for e in episodes] == [
            (p, k, [i]) for p, i in enumerate(indices) for k in range(2)]
        seeds = [e.answer.split("@")[1] for e in episodes]
        assert seeds[:6] == ["11"] * 6 and len(set(seeds[6:])) == 1 and seeds[6] != "11"  # rank 0: 3 prompts, rank 1: 2
        assert stats == {"engine_new_tokens": 10.0}
    assert [e.answer for e in two_ranks[0]["rollout"][0]] == [e.answer for e in two_ranks[1]["rollout"][0]]


def test_under_fsdp_each_rank_holds_half_the_trained_weights_and_optimizer_state(two_ranks):
    if "local_fraction" not in two_ranks[0]:  # ddp: every rank holds all of it
        assert two_ranks[0]["optimizer_keys"] == two_ranks[1]["optimizer_keys"] != []
        assert two_ranks[0]["optimizer_local"] == two_ranks[1]["optimizer_local"]
        return
    assert all(0.4 < r["local_fraction"] < 0.6 for r in two_ranks), [r["local_fraction"] for r in two_ranks]
    assert [r["shards_left"] for r in two_ranks] == [0, 0]  # a spent copy's shards are freed as it ends
    assert all(not k.isdigit() for r in two_ranks for k in r["optimizer_keys"])  # by name
    # AdamW's two moments of every trained weight, half of them on each rank between rounds
    assert two_ranks[0]["optimizer_local"] + two_ranks[1]["optimizer_local"] == pytest.approx(
        2 * sum(p.numel() for p in make_tiny_policy(seed=0).model.parameters()), abs=100)


def test_a_checkpoint_resumes_under_the_other_strategy(two_ranks, one_process):
    """The optimizer state of an fsdp checkpoint is keyed by parameter name, of a ddp or one-process one by
    position: either resumes in one process to the same weights as the run that wrote it."""
    resumed = load_policy(two_ranks[0]["checkpoint"], device="cpu", with_optimizer=True)
    rl_update(resumed, _rl_samples(resumed.tokenizer), RL[1])
    for name, value in resumed.model.state_dict().items():
        torch.testing.assert_close(value, one_process["weights"][f"resumed/{name}"], rtol=1e-4, atol=1e-5, msg=name)


def test_optimizer_states_convert_between_names_and_positions():
    policy = make_tiny_policy(seed=0)
    optimizer = torch.optim.AdamW([{"params": list(policy.model.parameters())[::2]},
                                   {"params": list(policy.model.parameters())[1::2]}])
    policy.model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    names = distributed._parameter_names(policy.model, optimizer)
    by_name = distributed.keyed_by(optimizer.state_dict(), names, by_name=True)
    assert set(by_name["state"]) == set(names) and by_name["param_groups"][1]["params"][0] == list(
        dict(policy.model.named_parameters()))[1]
    back = distributed.keyed_by(by_name, names, by_name=False)
    assert back["param_groups"] == optimizer.state_dict()["param_groups"]
    assert all(torch.equal(back["state"][i]["exp_avg"], v["exp_avg"]) for i, v in optimizer.state_dict()["state"].items())
    with pytest.raises(ValueError, match="the model trains 3"):
        distributed.keyed_by(optimizer.state_dict(), names[:3], by_name=True)


def _layer_passes(policy: Policy, config: UpdateConfig) -> tuple[int, dict, dict]:
    """Forward passes through the first decoder layer's MLP in one RL update, its stats and the weights after it."""
    calls = []
    handle = policy.model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        stats = rl_update(policy, _rl_samples(policy.tokenizer), config)
    finally:
        handle.remove()
    return len(calls), stats, policy.model.state_dict()


def test_activation_checkpointing_recomputes_the_layers_and_changes_nothing_else():
    on = make_tiny_policy(seed=0)
    passes, stats, weights = _layer_passes(on, RL[2])
    off_passes, off_stats, off_weights = _layer_passes(make_tiny_policy(seed=0), replace(RL[2], gradient_checkpointing=False))
    trained = round(stats["trained_sample_fraction"] * 15)
    assert passes == off_passes + trained  # each trained row's layer runs again in its backward pass
    assert stats == pytest.approx(off_stats, rel=1e-6)
    for name, value in weights.items():
        torch.testing.assert_close(value, off_weights[name], rtol=1e-6, atol=1e-7, msg=name)
    assert not on.model.is_activation_checkpointing  # switched off again once the update is done
    losses = [supervised_train(make_tiny_policy(seed=0), _sft_examples(on.tokenizer), replace(SFT, gradient_checkpointing=c))
              for c in (True, False)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_each_rank_takes_its_own_cores_for_its_vllm_engine_and_binds_to_them(monkeypatch):
    from rlvr_factory.rollout.vllm_engine import EngineStartError, bind_cores, rank_cores

    assert rank_cores("0-1") == "0-1"  # one list: every rank's (and one process's)
    for rank, cores in enumerate(["0", "1,3"]):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert rank_cores("0|1,3") == cores
    with pytest.raises(EngineStartError, match="names 3 core lists for 2 rank"):
        rank_cores("0|1|2")
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    try:
        assert bind_cores(str(min(before))) == [min(before)]
        assert os.sched_getaffinity(0) == {min(before)} and torch.get_num_threads() == 1
        with pytest.raises(EngineStartError, match="is not a list of cores"):
            bind_cores("first")
        with pytest.raises(EngineStartError, match="cannot bind to cores"):
            bind_cores("100000")
    finally:
        os.sched_setaffinity(0, before)
        torch.set_num_threads(threads)
