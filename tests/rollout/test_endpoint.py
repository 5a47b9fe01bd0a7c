"""The OpenAI-compatible endpoint, driven by the real `openai` client and verifiers' token client (`renderers`):
what a client reads is what was sampled, every call is recorded token-exactly, concurrent calls share batches."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import make_scripted_policy, make_tiny_policy
from rlvr_factory.models.policy import save_policy
from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig, Recorder, calls_to_episodes
from rlvr_factory.rollout.hf import TransformersEngine


def forward_logprobs(policy, context: list[int], completion: list[int]) -> list[float]:
    """The log-prob of each completion token under the policy at temperature 1 (what the update computes)."""
    ids = torch.tensor([context + completion])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(context) - 1 : -1]
    return F.log_softmax(logits.float(), dim=-1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1).tolist()


@pytest.fixture(scope="module")
def random_endpoint():
    policy = make_tiny_policy(seed=1)
    with Endpoint(TransformersEngine(policy), policy.tokenizer, EndpointConfig(batch_wait_s=0.3)) as endpoint:
        yield policy, endpoint


def client(endpoint: Endpoint, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint.url + "/v1", api_key="none", max_retries=0, **kwargs)


def test_a_chat_completion_is_the_recorded_sample_and_its_logprobs_are_the_policys(random_endpoint):
    policy, endpoint = random_endpoint
    response = endpoint.run(lambda: client(endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "What is 2+2?"}], max_tokens=12, logprobs=True,
        user="s-chat", extra_body={"return_token_ids": True}))
    call = [c for c in endpoint.recorder.calls if c.session == "s-chat"][-1]
    choice = response.choices[0]
    assert choice.model_extra["token_ids"] == call.completion_ids and len(call.completion_ids) >= 1
    assert response.model_extra["prompt_token_ids"] == call.prompt_ids
    assert call.prompt_ids == list(policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=True)["input_ids"])
    assert choice.message.content == policy.tokenizer.decode(call.completion_ids, skip_special_tokens=True)
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(call.logprobs)
    assert call.logprobs == pytest.approx(forward_logprobs(policy, call.prompt_ids, call.completion_ids), abs=1e-4)
    assert response.usage.completion_tokens == len(call.completion_ids)
    assert choice.finish_reason == call.finish_reason


def test_a_stream_delivers_the_recorded_sample_token_by_token(random_endpoint):
    policy, endpoint = random_endpoint
    chunks = endpoint.run(lambda: list(client(endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=10, stream=True, user="s-stream",
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True})))
    call = [c for c in endpoint.recorder.calls if c.session == "s-stream"][-1]
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert "".join(d.delta.content or "" for d in deltas) == policy.tokenizer.decode(call.completion_ids,
                                                                                    skip_special_tokens=True)
    assert [t for d in deltas for t in (d.model_extra.get("token_ids") or [])] == call.completion_ids
    assert deltas[-1].finish_reason == call.finish_reason
    assert chunks[-1].usage.completion_tokens == len(call.completion_ids)


def test_concurrent_requests_are_sampled_in_shared_batches_and_each_gets_its_own_sample(random_endpoint):
    policy, endpoint = random_endpoint
    before = len(endpoint.server.batcher.batches)
    api = client(endpoint)

    def ask(i: int):
        return api.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"task {i}"}],
                                           max_tokens=8, user=f"s-concurrent-{i}",
                                           extra_body={"return_token_ids": True})

    def agents():
        with ThreadPoolExecutor(8) as pool:
            return list(pool.map(ask, range(8)))

    responses = endpoint.run(agents)
    assert max(endpoint.server.batcher.batches[before:]) > 1  # some were sampled together
    for i, response in enumerate(responses):
        (call,) = [c for c in endpoint.recorder.calls if c.session == f"s-concurrent-{i}"]
        assert response.choices[0].model_extra["token_ids"] == call.completion_ids
        assert call.logprobs == pytest.approx(forward_logprobs(policy, call.prompt_ids, call.completion_ids), abs=1e-4)


def test_n_choices_are_separate_samples_each_recorded(random_endpoint):
    _, endpoint = random_endpoint
    response = endpoint.run(lambda: client(endpoint).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "x"}], max_tokens=8, n=3, user="s-n",
        extra_body={"return_token_ids": True}))
    calls = [c for c in endpoint.recorder.calls if c.session == "s-n"]
    assert [c.model_extra["token_ids"] for c in response.choices] == [c.completion_ids for c in calls]
    assert len({tuple(c.completion_ids) for c in calls}) > 1


@pytest.mark.parametrize("kwargs, says", [
    ({"max_tokens": 10_000}, "exceeds this model's limit"),
    ({"temperature": -1}, "temperature must be between"),
    ({"extra_body": {"top_p": 0}}, "top_p must be between"),
    ({"n": 0}, "n must be between"),
    ({"logprobs": True, "top_logprobs": 3}, "top_logprobs is not served"),
    ({"stop": [""]}, "stop must be"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "only text"),
])
def test_bad_requests_are_400s_that_say_what_is_wrong(random_endpoint, kwargs, says):
    _, endpoint = random_endpoint
    arguments = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4} | kwargs
    with pytest.raises(openai.BadRequestError, match=says):
        endpoint.run(lambda: client(endpoint).chat.completions.create(**arguments))


def test_malformed_bodies_and_token_ids_are_400s_and_the_server_keeps_serving(random_endpoint):
    _, endpoint = random_endpoint
    def post(body: bytes) -> httpx.Response:
        return endpoint.run(lambda: httpx.post(endpoint.url + "/inference/v1/generate", content=body))

    for body, says in [(b"{not json", "not JSON"), (b"[1, 2]", "JSON object"),
                       (b'{"token_ids": [1, 99999], "sampling_params": {"max_tokens": 2}}', "token ids must be"),
                       (b'{"token_ids": [1, 2], "sampling_params": {"temperature": NaN}}', "NaN"),
                       (b'{"token_ids": [1, 2], "sampling_params": {"seed": 1' + b"0" * 400 + b'}}', "seed must be"),
                       (b'{"token_ids": [1, 2], "sampling_params": {"max_tokens": 2.5}}', "an integer"),
                       (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
                       (b'{"token_ids": []}', "non-empty")]:
        reply = post(body)
        assert reply.status_code == 400 and says in reply.json()["error"]["message"], (body, reply.text)
    assert httpx.get(endpoint.url + "/v1/models").json()["data"][0]["max_model_len"] == 256  # needs no engine
    assert post(b'{"token_ids": [1, 2], "sampling_params": {"max_tokens": 2}}').status_code == 200


def test_an_engine_failure_is_a_500_naming_it_and_the_next_request_is_served():
    policy = make_tiny_policy()
    engine = TransformersEngine(policy)
    real, failures = engine.generate, [RuntimeError("out of memory")]

    def flaky(requests, config):
        if failures:
            raise failures.pop()
        return real(requests, config)

    engine.generate = flaky
    with Endpoint(engine, policy.tokenizer) as endpoint:
        def ask():
            return client(endpoint).chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}],
                                                            max_tokens=3)

        with pytest.raises(openai.InternalServerError, match="out of memory"):
            endpoint.run(ask)
        assert endpoint.run(ask).choices[0].finish_reason in ("stop", "length")
        assert len(endpoint.recorder.calls) == 1  # the failed call recorded nothing


def test_a_stop_string_cuts_the_text_and_the_recorded_tokens_end_where_it_was_completed():
    policy = make_scripted_policy("abcd", after="\n")
    with Endpoint(TransformersEngine(policy), policy.tokenizer) as endpoint:
        response = endpoint.run(lambda: client(endpoint).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], max_tokens=8, stop=["c"], temperature=0))
        call = endpoint.recorder.calls[-1]
    assert response.choices[0].message.content == "ab" and response.choices[0].finish_reason == "stop"
    assert policy.tokenizer.decode(call.completion_ids) == "abc"  # sampled through the stop string's token


def test_an_agents_turns_in_one_session_become_one_token_exact_episode():
    """A two-turn agent (its tool's result in between) through the real client: the recorder joins the calls
    into one episode whose sampled tokens are the calls' samples and whose observation is the tokens between."""
    policy = make_scripted_policy("ok")
    with Endpoint(TransformersEngine(policy), policy.tokenizer) as endpoint:
        def agent():
            api = client(endpoint, default_headers={"X-Session-ID": "agent-1"})
            messages = [{"role": "user", "content": "use the tool"}]
            first = api.chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0)
            messages += [{"role": "assistant", "content": first.choices[0].message.content},
                         {"role": "tool", "content": "result: 42"}]
            api.chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0)
            api.chat.completions.create(model="m", messages=[{"role": "user", "content": "a new start"}], max_tokens=5)

        endpoint.run(agent)
        calls = list(endpoint.recorder.calls)
        (episode, restart) = endpoint.recorder.episodes("agent-1", policy.tokenizer.decode)
    assert [c.session for c in calls] == ["agent-1"] * 3
    assert len(episode.turns) == 2 and len(restart.turns) == 1
    assert episode.prompt_ids == calls[0].prompt_ids
    assert [t.action_ids for t in episode.turns] == [calls[0].completion_ids, calls[1].completion_ids]
    assert episode.prompt_ids + episode.completion_ids == calls[1].prompt_ids + calls[1].completion_ids
    assert "result: 42" in episode.turns[0].observation
    assert episode.loss_mask == [1] * len(calls[0].completion_ids) + [0] * len(episode.turns[0].observation_ids) \
        + [1] * len(calls[1].completion_ids)
    assert restart.prompt_ids == calls[2].prompt_ids


def test_a_call_that_rewrites_the_history_starts_a_new_episode():
    from rlvr_factory.rollout.endpoint import Call

    calls = [Call("s", "chat", [1, 2], [3, 4], [-0.1, -0.2], "stop"),
             Call("s", "chat", [1, 2, 3, 4, 5], [6], [-0.3], "stop"),  # extends: observation [5]
             Call("s", "chat", [1, 2, 9], [7], [-0.4], "length")]  # rewrote the first answer
    first, second = calls_to_episodes(calls)
    assert first.completion_ids == [3, 4, 5, 6] and first.loss_mask == [1, 1, 0, 1]
    assert first.logprobs == [-0.1, -0.2, 0.0, -0.3]
    assert second.prompt_ids == [1, 2, 9] and second.completion_ids == [7] and second.finish_reason == "length"


def test_verifiers_token_client_gets_exact_ids_and_logprobs_from_the_generate_route(tmp_path):
    """`renderers.client.generate` is what verifiers' training client (`TrainClient`) calls: it renders the
    chat locally and posts token ids to /inference/v1/generate, then checks the reply's shape strictly."""
    renderers = pytest.importorskip("renderers", reason="renderers (verifiers' token client) is in the test lock")
    from renderers.client import generate

    policy = make_tiny_policy(seed=2)
    renderer = renderers.create_renderer(policy.tokenizer, None)
    recorder = Recorder(tmp_path / "calls.jsonl")
    with Endpoint(TransformersEngine(policy), policy.tokenizer, recorder=recorder) as endpoint:
        async def run():
            api = openai.AsyncOpenAI(base_url=endpoint.url + "/v1", api_key="none", max_retries=0)
            return await asyncio.gather(*[
                generate(client=api, renderer=renderer, messages=[{"role": "user", "content": f"q{i}"}], model="m",
                         sampling_params={"max_tokens": 10, "temperature": 1.0}, extra_headers={"X-Session-ID": f"v{i}"})
                for i in range(3)])
        results = endpoint.run(asyncio.run, run())
    for i, result in enumerate(results):
        (call,) = [c for c in recorder.calls if c.session == f"v{i}"]
        assert result["prompt_ids"] == call.prompt_ids and result["completion_ids"] == call.completion_ids
        assert result["completion_logprobs"] == pytest.approx(call.logprobs)
        assert call.logprobs == pytest.approx(forward_logprobs(policy, call.prompt_ids, call.completion_ids), abs=1e-4)
    written = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [w["completion_ids"] for w in written] == [c.completion_ids for c in recorder.calls]


def test_rlvr_serve_serves_a_saved_checkpoint_and_records_its_calls(tmp_path):
    policy = make_tiny_policy(seed=3)
    save_policy(policy, tmp_path / "ckpt")
    record = tmp_path / "calls.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "rlvr_factory.console", "serve", "--model", str(tmp_path / "ckpt"),
                                "--port", "0", "--record", str(record)], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not lines or "serving" not in lines[-1] and process.poll() is None:
            lines.append(process.stderr.readline())
        line = lines[-1]
        assert "serving ckpt on http://127.0.0.1:" in line, "".join(lines)
        url = line.split(" on ")[1].split("/v1")[0]
        api = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        assert [m.id for m in api.models.list()] == ["ckpt"]
        reply = api.chat.completions.create(model="ckpt", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                            extra_body={"return_token_ids": True})
        deadline = time.monotonic() + 10
        while not record.exists() or not record.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        (written,) = [json.loads(line) for line in record.read_text().splitlines()]
        assert written["completion_ids"] == reply.choices[0].model_extra["token_ids"]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_rlvr_serve_refuses_a_missing_checkpoint_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlvr_factory.console", "serve", "--model", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "rlvr serve: cannot load" in done.stderr and "Traceback" not in done.stderr


def test_the_generate_routes_stop_token_ids_cut_the_sample_after_the_first_one_sampled():
    policy = make_scripted_policy("abcd")
    stop = policy.tokenizer.convert_tokens_to_ids("b")
    with Endpoint(TransformersEngine(policy), policy.tokenizer) as endpoint:
        context = list(policy.tokenizer("\n")["input_ids"])
        reply = endpoint.run(lambda: httpx.post(endpoint.url + "/inference/v1/generate", json={
            "token_ids": context, "sampling_params": {"max_tokens": 8, "temperature": 0, "stop_token_ids": [stop]}}).json())
    (choice,) = reply["choices"]
    assert policy.tokenizer.decode(choice["token_ids"]) == "ab" and choice["finish_reason"] == "stop"
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert endpoint.recorder.calls[-1].completion_ids == choice["token_ids"]


def test_the_engine_samples_on_the_thread_that_runs_the_agent_code_and_an_agents_exception_reaches_it():
    """vLLM's CPU kernels fail when another thread than the engine's samples (they check the thread counts)."""
    import threading

    policy = make_tiny_policy()
    engine = TransformersEngine(policy)
    real, threads = engine.generate, []

    def recording(requests, config):
        threads.append(threading.get_ident())
        return real(requests, config)

    engine.generate = recording

    def agent():
        client(endpoint).chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}], max_tokens=2)
        raise KeyError("the agent's own bug")

    with Endpoint(engine, policy.tokenizer) as endpoint:
        with pytest.raises(KeyError, match="the agent's own bug"):
            endpoint.run(agent)
    assert threads == [threading.get_ident()]
