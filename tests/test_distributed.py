"""Data-parallel training: two gloo processes, joined the way torchrun joins them (the `env://`
variables), train exactly as one process does on the same global batches."""

from __future__ import annotations

import copy
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from rlvr_factory import distributed
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.training.sft import SFTConfig, encode_chat_examples, supervised_train
from tests.conftest import make_tiny_policy

WORLD = 2
SFT = SFTConfig(steps=3, batch_size=5, lr=3e-3, warmup_steps=1, seed=1)
# Two minibatches of uneven shares, micro-batches of 2 per rank, two epochs (so the old log-probs are
# computed, sharded), a KL term in the loss and DAPO's token-mean: every normaliser spans the minibatch.
RL = [
    UpdateConfig(lr=5e-3, minibatch_size=7, micro_batch_size=2, epochs=2, kl_coef=0.1, seed=3),
    UpdateConfig(lr=5e-3, minibatch_size=12, loss_aggregation="seq-mean-token-mean", seed=4),
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
    return samples


def train(out: Path) -> dict:
    """A few SFT steps, then one RL round under each of `RL`: the losses, the stats and the weights."""
    torch.manual_seed(0)
    policy = make_tiny_policy(seed=0)
    sft_losses = supervised_train(policy, _sft_examples(policy.tokenizer), SFT)
    reference = copy.deepcopy(policy.model)
    stats = [rl_update(policy, _rl_samples(policy.tokenizer), config, reference) for config in RL]
    result = {"sft_losses": sft_losses, "rl_stats": stats,
              "weights": {k: v.clone() for k, v in policy.model.state_dict().items()}}
    result["rollout"] = distributed.shard_run(_record_run)([9, 4, 7, 1, 3], 11)
    torch.save(result, out / f"rank{distributed.rank()}.pt")
    return result


def _rank_main(rank: int, port: int, out: Path) -> None:
    os.environ.update(WORLD_SIZE=str(WORLD), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    assert distributed.init(distributed.DistributedConfig(backend="gloo"))
    try:
        train(out)
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ddp")
    mp.start_processes(_rank_main, args=(_free_port(), out), nprocs=WORLD, start_method="spawn")
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


def test_a_bad_configuration_names_the_key_and_the_allowed_values():
    with pytest.raises(ValueError, match="distributed.backend must be one of"):
        distributed.DistributedConfig(backend="mpi")
    with pytest.raises(ValueError, match="FSDP is not supported"):
        distributed.DistributedConfig(strategy="fsdp")


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
