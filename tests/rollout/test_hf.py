"""Batched sampling with transformers `generate`."""

import pytest
import torch
from transformers import GenerationConfig

from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.engine import Request
from rlvr_factory.rollout.hf import SamplingConfig, TransformersEngine, generate
from rlvr_factory.training.sft import encode_prompts
from tests.conftest import make_scripted_policy, make_tiny_policy

PROMPTS = ["Compute 1+2", "Compute 34*5-6"]


def always_predicts(token: str) -> Policy:
    """A tiny Llama whose next token is `token` with probability ~1 after any context.

    The blocks' output projections are zeroed so the residual stream is the token
    embedding, every embedding is the same unit vector, and only `token`'s output row
    points along it.
    """
    policy = make_tiny_policy(tie_word_embeddings=False)
    model, tokenizer = policy.model, policy.tokenizer
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.model.embed_tokens.weight[:, 0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[tokenizer.convert_tokens_to_ids(token), 0] = 100.0
    return policy


def test_each_prompt_gets_num_samples_completions_with_their_indices(tiny_policy):
    completions, _ = generate(tiny_policy, PROMPTS, 3, SamplingConfig(max_new_tokens=4))
    assert len(completions) == 6
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(i, s) for i in range(2) for s in range(3)]


def test_completions_carry_their_chat_templated_prompt_ids(tiny_policy):
    completions, _ = generate(tiny_policy, PROMPTS, 2, SamplingConfig(max_new_tokens=4))
    encoded = encode_prompts(tiny_policy.tokenizer, PROMPTS)
    for c in completions:
        assert c.prompt_ids == encoded[c.prompt_index]


def test_a_completion_without_eos_runs_to_the_budget_with_finish_reason_length():
    policy = always_predicts("a")
    completions, _ = generate(policy, PROMPTS, 2, SamplingConfig(max_new_tokens=5))
    a = policy.tokenizer.convert_tokens_to_ids("a")
    for c in completions:
        assert c.finish_reason == "length"
        assert c.completion_ids == [a] * 5
        assert c.text == "aaaaa"


def test_a_completion_that_emits_eos_stops_there_with_finish_reason_stop():
    policy = always_predicts("<|im_end|>")
    completions, _ = generate(policy, PROMPTS, 2, SamplingConfig(max_new_tokens=5))
    for c in completions:
        assert c.finish_reason == "stop"
        assert c.completion_ids == [policy.tokenizer.eos_token_id]
        assert c.text == ""


def test_a_stopped_completion_keeps_its_eos_id_but_not_its_eos_text():
    policy = make_scripted_policy("\\boxed{3}")
    (completion,), _ = generate(policy, PROMPTS[:1], 1, SamplingConfig(max_new_tokens=20))
    assert completion.finish_reason == "stop"
    assert completion.text == "\\boxed{3}"
    assert completion.completion_ids == policy.tokenizer("\\boxed{3}")["input_ids"] + [policy.tokenizer.eos_token_id]


def test_the_random_model_runs_out_of_budget_or_stops_consistently(tiny_policy):
    completions, _ = generate(tiny_policy, PROMPTS, 4, SamplingConfig(max_new_tokens=6))
    eos = tiny_policy.tokenizer.eos_token_id
    for c in completions:
        if c.finish_reason == "stop":
            assert c.completion_ids[-1] == eos and eos not in c.completion_ids[:-1]
        else:
            assert c.finish_reason == "length" and eos not in c.completion_ids and len(c.completion_ids) == 6
        assert c.text == tiny_policy.tokenizer.decode(c.completion_ids, skip_special_tokens=True)


def test_the_same_seed_gives_identical_samples(tiny_policy):
    config = SamplingConfig(max_new_tokens=8, seed=11)
    first, _ = generate(tiny_policy, PROMPTS, 3, config)
    second, _ = generate(tiny_policy, PROMPTS, 3, config)
    assert [c.completion_ids for c in first] == [c.completion_ids for c in second]


def test_another_seed_gives_other_samples(tiny_policy):
    first, _ = generate(tiny_policy, PROMPTS, 3, SamplingConfig(max_new_tokens=8, seed=11))
    second, _ = generate(tiny_policy, PROMPTS, 3, SamplingConfig(max_new_tokens=8, seed=12))
    assert [c.completion_ids for c in first] != [c.completion_ids for c in second]


def test_samples_of_one_prompt_differ_from_each_other(tiny_policy):
    completions, _ = generate(tiny_policy, PROMPTS[:1], 4, SamplingConfig(max_new_tokens=8))
    assert len({tuple(c.completion_ids) for c in completions}) > 1


def test_greedy_decoding_is_deterministic_and_the_same_for_every_sample(tiny_policy):
    config = SamplingConfig(max_new_tokens=8, temperature=0.0)
    first, _ = generate(tiny_policy, PROMPTS, 3, config)
    second, _ = generate(tiny_policy, PROMPTS, 3, SamplingConfig(max_new_tokens=8, temperature=0.0, seed=99))
    assert [c.completion_ids for c in first] == [c.completion_ids for c in second]
    for i in range(len(PROMPTS)):
        assert len({tuple(c.completion_ids) for c in first if c.prompt_index == i}) == 1


def test_greedy_decoding_picks_the_most_likely_token(tiny_policy):
    (completion,), _ = generate(tiny_policy, PROMPTS[:1], 1, SamplingConfig(max_new_tokens=1, temperature=0.0))
    prompt = torch.tensor([completion.prompt_ids])
    with torch.no_grad():
        expected = int(tiny_policy.model(input_ids=prompt).logits[0, -1].argmax())
    assert completion.completion_ids == [expected]


def test_left_padding_does_not_change_greedy_completions(tiny_policy):
    config = SamplingConfig(max_new_tokens=6, temperature=0.0)
    batched, _ = generate(tiny_policy, PROMPTS, 1, config)
    alone = [generate(tiny_policy, [p], 1, config)[0][0] for p in PROMPTS]
    assert [c.completion_ids for c in batched] == [c.completion_ids for c in alone]


def test_small_batches_cover_every_job(tiny_policy):
    completions, _ = generate(tiny_policy, PROMPTS, 3, SamplingConfig(max_new_tokens=2, batch_size=4))
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(i, s) for i in range(2) for s in range(3)]


def test_batches_by_length_group_similar_contexts_and_sample_the_same_greedy_tokens(tiny_policy):
    class RecordingBatches(TransformersEngine):
        def _run(self, contexts, *args):
            self.batches.append([len(c) for c in contexts])
            return super()._run(contexts, *args)

    prompts = encode_prompts(tiny_policy.tokenizer, ["1+2", "a much longer prompt of many bytes, " * 3, "3*4",
                                                     "another long prompt that pads the short ones " * 2])
    requests = [Request(p) for p in prompts]
    out = {}
    for by_length in (False, True):
        engine = RecordingBatches(tiny_policy, reuse_kv=False)
        engine.batches = []
        config = SamplingConfig(max_new_tokens=5, temperature=0.0, batch_size=2, batch_by_length=by_length)
        generations, stats = engine.generate(requests, config)
        out[by_length] = ([g.token_ids for g in generations], engine.batches, stats.prefill_tokens)
    lengths = [len(p) for p in prompts]
    assert out[False][1] == [lengths[:2], lengths[2:]]  # request order: each batch pads a short prompt to a long one
    assert out[True][1] == [[lengths[0], lengths[2]], [lengths[1], lengths[3]]]  # the short pair, then the long pair
    padded = {k: sum(len(b) * max(b) for b in batches) for k, (_, batches, _) in out.items()}
    assert padded[True] < padded[False] and out[True][2] == out[False][2] == sum(lengths)
    assert out[True][0] == out[False][0]  # each generation lands at its request's place, the same greedy tokens


def test_shared_prefill_runs_a_repeated_context_once_and_samples_what_each_row_would_alone(tiny_policy):
    """A group's samples (and pass@k's) repeat one prompt: with `share_prefill` the prompt goes through the
    model once and every row continues from a copy of its KV cache, sampling the same tokens (greedy and
    seeded) with the same log-probs as when each row computes its own."""
    prompts = encode_prompts(tiny_policy.tokenizer, ["1+2", "a much longer prompt of many bytes", "3*45"])
    requests = [Request(p) for p in prompts for _ in range(3)] + [Request(prompts[0])]  # 3 groups and a straggler
    out = {}
    for share in (False, True):
        for temperature in (0.0, 1.0):
            config = SamplingConfig(max_new_tokens=6, temperature=temperature, batch_size=5, share_prefill=share, seed=3)
            generations, stats = TransformersEngine(tiny_policy, reuse_kv=False).generate(requests, config)
            out[share, temperature] = (generations, stats)
    for temperature in (0.0, 1.0):
        alone, shared = out[False, temperature][0], out[True, temperature][0]
        assert [g.token_ids for g in shared] == [g.token_ids for g in alone]
        assert [g.finish_reason for g in shared] == [g.finish_reason for g in alone]
        for a, b in zip(alone, shared):
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    assert len({tuple(g.token_ids) for g in out[True, 1.0][0][:3]}) > 1  # a group's samples still differ
    unshared, shared = out[False, 1.0][1], out[True, 1.0][1]
    lengths = [len(r.context) for r in requests]
    assert unshared.prefill_tokens == sum(lengths) and unshared.cached_tokens == 0
    # batches of 5: [p0 p0 p0 p1 p1] [p1 p2 p2 p2 p0]: each distinct prompt's prefix once a batch, each row's last token
    distinct = (len(prompts[0]) - 1) + (len(prompts[1]) - 1) + (len(prompts[1]) - 1) + (len(prompts[2]) - 1) + (len(prompts[0]) - 1)
    assert shared.prefill_tokens == distinct + len(requests)
    assert shared.prefill_tokens + shared.cached_tokens == sum(lengths)


def test_a_second_turn_continues_the_cache_of_a_shared_prefill_as_it_would_a_computed_one(tiny_policy):
    prompt = encode_prompts(tiny_policy.tokenizer, ["Compute 1+2"])[0]
    tail = tiny_policy.tokenizer(" ok")["input_ids"]
    turns = {}
    for share in (False, True):
        engine = TransformersEngine(tiny_policy)
        config = SamplingConfig(max_new_tokens=4, temperature=1.0, share_prefill=share, seed=5)
        first, _ = engine.generate([Request(prompt, key=k) for k in range(4)], config)
        second, stats = engine.generate([Request(prompt + g.token_ids + tail, key=k) for k, g in enumerate(first)], config)
        assert stats.cached_tokens == sum(len(prompt) + len(g.token_ids) - 1 for g in first)  # every row's cache reused (its last token was never run)
        turns[share] = ([g.token_ids for g in first], [g.token_ids for g in second], [g.logprobs for g in second])
    assert turns[True][:2] == turns[False][:2]
    for a, b in zip(turns[False][2], turns[True][2]):
        assert b == pytest.approx(a, abs=1e-4)


def test_shared_prefill_leaves_batches_of_distinct_contexts_as_they_were(tiny_policy):
    prompts = encode_prompts(tiny_policy.tokenizer, PROMPTS)
    config = SamplingConfig(max_new_tokens=4, temperature=0.0, share_prefill=True)
    generations, stats = TransformersEngine(tiny_policy, reuse_kv=False).generate([Request(p) for p in prompts], config)
    plain, _ = TransformersEngine(tiny_policy, reuse_kv=False).generate(
        [Request(p) for p in prompts], SamplingConfig(max_new_tokens=4, temperature=0.0))
    assert [g.token_ids for g in generations] == [g.token_ids for g in plain]
    assert stats.prefill_tokens == sum(map(len, prompts)) and stats.cached_tokens == 0


def test_timing_stats_are_reported(tiny_policy):
    _, stats = generate(tiny_policy, PROMPTS, 1, SamplingConfig(max_new_tokens=3))
    assert stats["seconds"] > 0 and stats["tokens_per_second"] > 0


# The engine: token ids in, the sampled ids and their sampling log-probs out, KV caches continued across turns


def test_sampling_logprobs_are_those_of_the_distribution_each_token_was_drawn_from(tiny_policy):
    prompt = encode_prompts(tiny_policy.tokenizer, PROMPTS[:1])[0]
    config = SamplingConfig(max_new_tokens=5, temperature=0.7, seed=4)
    (g,), _ = TransformersEngine(tiny_policy).generate([Request(prompt)], config)
    ids = torch.tensor([prompt + g.token_ids])
    with torch.no_grad():
        logits = tiny_policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids).unsqueeze(-1)).squeeze(-1)
    assert g.logprobs == pytest.approx(expected.tolist(), abs=1e-5)


def test_a_continued_context_reuses_the_cache_and_a_diverging_one_is_recomputed(tiny_policy):
    engine = TransformersEngine(tiny_policy)
    prompts = encode_prompts(tiny_policy.tokenizer, PROMPTS)
    config = SamplingConfig(max_new_tokens=4, temperature=0.0)
    first, stats = engine.generate([Request(p, key=i) for i, p in enumerate(prompts)], config)
    assert stats.prefill_tokens == sum(map(len, prompts)) and stats.cached_tokens == 0
    tail = tiny_policy.tokenizer(" ok")["input_ids"]
    continued = [p + g.token_ids + tail for p, g in zip(prompts, first)]
    edited = [t + 1 for t in continued[1]]  # same key, a context that does not extend what it sampled
    again, stats = engine.generate([Request(continued[0], key=0), Request(edited, key=1)], config)
    fresh, _ = TransformersEngine(tiny_policy, reuse_kv=False).generate([Request(continued[0]), Request(edited)], config)
    assert [g.token_ids for g in again] == [g.token_ids for g in fresh]
    assert stats.cached_tokens == len(prompts[0]) + len(first[0].token_ids) - 1
    assert stats.prefill_tokens == 1 + len(tail) + len(edited)


def test_rows_that_stopped_early_continue_correctly_from_a_shared_cache():
    policy = make_scripted_policy("abc")
    prompts = encode_prompts(policy.tokenizer, ["x", "a much longer prompt"])
    config = SamplingConfig(max_new_tokens=6, temperature=0.0)
    engine = TransformersEngine(policy)
    first, _ = engine.generate([Request(p, key=i) for i, p in enumerate(prompts)], config)
    assert all(g.finish_reason == "stop" for g in first)  # then padding was generated into the cache
    follow = policy.tokenizer("\n")["input_ids"]
    contexts = [p + g.token_ids + follow for p, g in zip(prompts, first)]
    reused, _ = engine.generate([Request(c, key=i) for i, c in enumerate(contexts)], config)
    fresh, _ = TransformersEngine(policy, reuse_kv=False).generate([Request(c) for c in contexts], config)
    assert [g.token_ids for g in reused] == [g.token_ids for g in fresh] == [first[0].token_ids] * 2
    assert [x for g in reused for x in g.logprobs] == pytest.approx([x for g in fresh for x in g.logprobs], abs=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_models_own_generation_defaults_do_not_change_what_is_sampled(temperature):
    """A hub generation_config.json's penalties and truncations (here: strong enough to forbid every repeat)
    stay out of rollouts: the engine samples from the policy's distribution under SamplingConfig alone."""
    policy = always_predicts("a")
    policy.model.generation_config = GenerationConfig(
        do_sample=True, temperature=0.7, top_k=20, repetition_penalty=1.3, no_repeat_ngram_size=1, min_p=0.1)
    context = policy.tokenizer("Compute 1+2")["input_ids"]
    (generation,), _ = TransformersEngine(policy, reuse_kv=False).generate(
        [Request(context)], SamplingConfig(max_new_tokens=4, temperature=temperature, seed=0))
    assert policy.tokenizer.decode(generation.token_ids) == "aaaa"
    assert generation.logprobs == pytest.approx([0.0] * 4, abs=1e-4)
