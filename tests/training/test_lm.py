"""Batching, token log-probs, optimiser groups, LR schedules and minibatching."""

import random

import pytest
import torch
import torch.nn.functional as F

from rlvr_factory.training import lm
from rlvr_factory.training.lm import (
    join_prompt_completion,
    lr_schedule,
    make_optimizer,
    minibatches,
    pad_batch,
    token_logprobs,
)

PAD = 0


# pad_batch


def test_pad_batch_pads_on_the_right_by_default():
    ids, mask = pad_batch([[5, 6, 7], [8]], PAD)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long


def test_pad_batch_can_pad_on_the_left():
    ids, mask = pad_batch([[5, 6, 7], [8]], 9, left=True)
    assert ids.tolist() == [[5, 6, 7], [9, 9, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_pad_batch_accepts_tuples_and_equal_lengths():
    ids, mask = pad_batch([(1, 2), (3, 4)], PAD)
    assert ids.tolist() == [[1, 2], [3, 4]] and mask.tolist() == [[1, 1], [1, 1]]


# join_prompt_completion


def test_join_marks_only_completion_tokens():
    ids, attention, completion = join_prompt_completion([[1, 2], [3]], [[4, 5], [6, 7, 8]], PAD)
    assert ids.tolist() == [[1, 2, 4, 5], [3, 6, 7, 8]]
    assert attention.tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]
    assert completion.tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]


def test_join_leaves_padding_out_of_the_completion_mask():
    ids, attention, completion = join_prompt_completion([[1, 2, 3], [4]], [[5], [6]], PAD)
    assert ids.tolist() == [[1, 2, 3, 5], [4, 6, 0, 0]]
    assert attention.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert completion.tolist() == [[0, 0, 0, 1], [0, 1, 0, 0]]


def test_join_with_an_empty_prompt_marks_the_whole_sequence():
    _, _, completion = join_prompt_completion([[]], [[4, 5, 6]], PAD)
    assert completion.tolist() == [[1, 1, 1]]


# token_logprobs


def test_token_logprobs_equal_the_log_softmax_of_the_next_token(tiny_policy):
    ids = torch.tensor([[1, 50, 60, 70, 2], [1, 80, 81, 82, 83]])
    attention = torch.ones_like(ids)
    logp, entropy = token_logprobs(tiny_policy.model, ids, attention)
    with torch.no_grad():
        log_probs = F.log_softmax(tiny_policy.model(input_ids=ids).logits.float(), dim=-1)
    expected = torch.zeros(2, 5)
    for b in range(2):
        for t in range(1, 5):
            expected[b, t] = log_probs[b, t - 1, ids[b, t]]
    torch.testing.assert_close(logp.detach(), expected)
    assert entropy is None


def test_the_first_position_has_log_prob_zero(tiny_policy):
    ids = torch.tensor([[1, 50, 60]])
    logp, _ = token_logprobs(tiny_policy.model, ids, torch.ones_like(ids))
    assert logp[0, 0].item() == 0.0
    assert (logp[0, 1:] < 0).all()


def test_token_logprobs_are_invariant_to_right_padding(tiny_policy):
    short = torch.tensor([[1, 50, 60, 70]])
    padded = torch.tensor([[1, 50, 60, 70, PAD, PAD, PAD]])
    logp_short, _ = token_logprobs(tiny_policy.model, short, torch.ones_like(short))
    logp_padded, _ = token_logprobs(tiny_policy.model, padded, torch.tensor([[1, 1, 1, 1, 0, 0, 0]]))
    torch.testing.assert_close(logp_padded[:, :4], logp_short, atol=1e-5, rtol=0)


def test_a_row_gets_the_same_log_probs_alone_and_in_a_right_padded_batch(tiny_policy):
    ids, attention, _ = join_prompt_completion([[1, 50], [1, 60, 61, 62]], [[70, 2], [71, 72, 2]], PAD)
    batch_logp, _ = token_logprobs(tiny_policy.model, ids, attention)
    alone = torch.tensor([[1, 50, 70, 2]])
    alone_logp, _ = token_logprobs(tiny_policy.model, alone, torch.ones_like(alone))
    torch.testing.assert_close(batch_logp[0, :4], alone_logp[0], atol=1e-5, rtol=0)


def test_entropy_is_that_of_the_predictive_distribution(tiny_policy):
    ids = torch.tensor([[1, 50, 60, 70]])
    _, entropy = token_logprobs(tiny_policy.model, ids, torch.ones_like(ids), with_entropy=True)
    with torch.no_grad():
        probs = F.softmax(tiny_policy.model(input_ids=ids).logits.float(), dim=-1)[:, :-1]
    expected = F.pad(-(probs * probs.log()).sum(-1), (1, 0))
    torch.testing.assert_close(entropy.detach(), expected, atol=1e-5, rtol=1e-5)
    assert entropy[0, 0].item() == 0.0


def test_token_logprobs_are_differentiable(tiny_policy):
    ids = torch.tensor([[1, 50, 60]])
    logp, _ = token_logprobs(tiny_policy.model, ids, torch.ones_like(ids))
    logp.sum().backward()
    assert tiny_policy.model.lm_head.weight.grad is not None


def _reference_logprobs_and_entropy(model, ids, attention):
    """The full-vocabulary log-softmax over every position: what the lean path must equal."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    logp_all = F.log_softmax(logits, dim=-1)
    logp = F.pad(logp_all.gather(-1, ids[:, 1:, None]).squeeze(-1), (1, 0))
    return logp, F.pad(-(logp_all.exp() * logp_all).sum(-1), (1, 0))


def test_only_the_requested_positions_are_scored(tiny_policy):
    ids, attention, completion = join_prompt_completion([[1, 50, 51], [1, 60]], [[70, 2], [71, 72, 73, 2]], PAD)
    logp, entropy = token_logprobs(tiny_policy.model, ids, attention, with_entropy=True, positions=completion)
    with torch.no_grad():
        ref_logp, ref_entropy = _reference_logprobs_and_entropy(tiny_policy.model, ids, attention)
    scored = completion.bool()
    torch.testing.assert_close(logp[scored].detach(), ref_logp[scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy[scored], ref_entropy[scored], atol=1e-5, rtol=1e-5)
    assert (logp[~scored] == 0).all() and (entropy[~scored] == 0).all()


@pytest.mark.parametrize("chunk_elements", [1, 3 * 260, 10**9])  # one token a chunk, three, all at once
def test_chunked_log_probs_and_gradients_equal_the_full_log_softmax(tiny_policy, monkeypatch, chunk_elements):
    monkeypatch.setattr(lm, "LOGIT_CHUNK_ELEMENTS", chunk_elements)
    ids, attention, completion = join_prompt_completion([[1, 50], [1, 60, 61]], [[70, 71, 2], [72, 2]], PAD)
    model = tiny_policy.model
    logp, entropy = token_logprobs(model, ids, attention, with_entropy=True, positions=completion)
    (logp.sum() - entropy.sum()).backward()
    lean = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref_logp, ref_entropy = _reference_logprobs_and_entropy(model, ids, attention)
    mask = completion.float()
    ((ref_logp * mask).sum() - (ref_entropy * mask).sum()).backward()
    torch.testing.assert_close(logp.detach(), ref_logp.detach() * mask, atol=1e-5, rtol=1e-5)
    for got, want in zip(lean, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_entropy_gradients_do_not_depend_on_the_thread_count(tiny_policy):
    """A run resumed in a process with other torch threads must train exactly as the uninterrupted one."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (8, 48), generator=generator)
    weights = torch.rand(ids.shape, generator=generator)
    grads = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            tiny_policy.model.zero_grad()
            _, entropy = token_logprobs(tiny_policy.model, ids, torch.ones_like(ids), with_entropy=True)
            (entropy * weights).sum().backward()
            grads.append([p.grad.clone() for p in tiny_policy.model.parameters()])
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_entropy_for_logging_carries_no_gradient(tiny_policy):
    ids = torch.tensor([[1, 50, 60, 70]])
    logp, entropy = token_logprobs(tiny_policy.model, ids, torch.ones_like(ids), with_entropy=True, entropy_grad=False)
    assert logp.requires_grad and not entropy.requires_grad


def test_a_model_whose_logits_are_more_than_its_output_layer_is_scored_from_its_logits(tiny_policy):
    class SoftCapped(type(tiny_policy.model)):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)  # Gemma-2-style final soft-capping
            return out

    model = SoftCapped(tiny_policy.model.config)
    model.load_state_dict(tiny_policy.model.state_dict())
    ids = torch.tensor([[1, 50, 60, 70, 2]])
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, torch.ones_like(ids))
        ref_logp, _ = _reference_logprobs_and_entropy(model, ids, torch.ones_like(ids))
    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-5)


# make_optimizer


def test_weight_decay_applies_to_matrices_only(tiny_policy):
    optimizer = make_optimizer(tiny_policy.model, lr=1e-3, weight_decay=0.1)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and decay["params"]
    assert all(p.dim() < 2 for p in no_decay["params"]) and no_decay["params"]
    n_params = sum(1 for p in tiny_policy.model.parameters() if p.requires_grad)
    assert len(decay["params"]) + len(no_decay["params"]) == n_params
    assert optimizer.defaults["lr"] == 1e-3


# lr_schedule


def lr_factors(kind: str, warmup: int, total: int, steps: int) -> list[float]:
    """The LR multiplier used at each of `steps` optimizer steps (base LR 1)."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = lr_schedule(optimizer, kind, warmup, total)
    factors = []
    for _ in range(steps):
        factors.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return factors


def test_warm_up_is_linear_from_one_step_to_the_peak():
    assert lr_factors("constant", warmup=4, total=10, steps=5) == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0])


def test_cosine_decays_from_the_peak_to_ten_percent():
    factors = lr_factors("cosine", warmup=2, total=6, steps=9)
    # after warm-up, progress = (step - 2) / 4: 0, 0.25, 0.5, 0.75, 1, then held at 1
    cosine = [0.1 + 0.45 * (1 + c) for c in (1.0, 2**-0.5, 0.0, -(2**-0.5), -1.0, -1.0, -1.0)]
    assert factors == pytest.approx([0.5, 1.0] + cosine)


def test_linear_decays_from_the_peak_to_zero():
    factors = lr_factors("linear", warmup=1, total=5, steps=7)
    assert factors == pytest.approx([1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0])


def test_constant_holds_the_peak_after_warm_up():
    assert lr_factors("constant", warmup=0, total=3, steps=5) == pytest.approx([1.0] * 5)


def test_no_warm_up_starts_at_the_peak():
    assert lr_factors("cosine", warmup=0, total=4, steps=1) == pytest.approx([1.0])


def test_an_unknown_schedule_raises_value_error():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="'step'"):
        lr_schedule(optimizer, "step", 0, 10)


# minibatches


def test_minibatches_cover_every_index_exactly_once():
    batches = list(minibatches(23, 5, random.Random(0)))
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(23))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 3]


def test_minibatches_are_shuffled_and_reproducible():
    first = list(minibatches(50, 50, random.Random(1)))
    assert first == list(minibatches(50, 50, random.Random(1)))
    assert first[0] != list(range(50))
    assert first != list(minibatches(50, 50, random.Random(2)))


def test_a_minibatch_larger_than_the_data_is_one_batch():
    assert [sorted(b) for b in minibatches(3, 10, random.Random(0))] == [[0, 1, 2]]
