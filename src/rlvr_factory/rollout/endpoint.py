"""An OpenAI-compatible endpoint that serves a policy through an `Engine` and records every call token-exactly.

Agent code written against an OpenAI client, and `verifiers` environments, drive the model themselves:
they send chat histories, not token ids. This endpoint lets them sample from the policy being
trained, and keeps what the update needs: for every call, the context's token ids, the tokens
sampled, exactly, and their sampling log-probs.

Routes (FastAPI, served by uvicorn):
- ``GET /v1/models``: the one model served, with vLLM's ``max_model_len`` extension.
- ``POST /v1/chat/completions``: the history rendered with the tokenizer's chat template (``tools``
  passed to it), sampled, answered whole or streamed as server-sent events (``stream``; with
  ``stream_options.include_usage``). ``n``, ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
  ``top_p``, ``seed``, ``stop`` and ``logprobs`` are honoured; vLLM's ``return_token_ids`` adds
  ``prompt_token_ids`` and each choice's ``token_ids``. ``top_logprobs`` above 0 is refused (the engines
  record the sampled token's log-prob only).
- ``POST /inference/v1/generate``: vLLM's token-in/token-out route, as `verifiers`' training client
  (`renderers.client.generate`) calls it: ``token_ids`` and ``sampling_params`` in; each choice's
  ``token_ids``, ``logprobs.content`` (``token: "token_id:N"``) and ``finish_reason`` out.
- ``GET /health``.

Requests that arrive together are sampled together: the engine's own thread (the one that calls
`Endpoint.run` with the agent code, or `serve_forever`) takes what is queued (up to `max_batch`, waiting
`batch_wait_s` after the first), groups it by sampling settings and calls `engine.generate` once per
group, so concurrent agents share the engine's batches. A sample
depends on the batch it joins (the engine draws one seed per batch), so a run that needs
repeatable samples sends its requests in a fixed order or sets `max_batch: 1`.

Stops: the engine ends a turn at the tokenizer's end-of-turn token or the token budget. A request's
own stop strings or stop token ids cut what was sampled after the token that completes the first of
them; sampling is causal, so the tokens kept are exactly those an engine that stopped there would
have sampled, with the same log-probs.

Every call is recorded (`Recorder`): the session it belongs to (the ``X-Session-ID`` header, which
`verifiers` sends, else the ``user`` field, else its own), its context and its sample. A session's
calls become `Episode`s (`Recorder.episodes`): a call whose context extends an episode's tokens is
that episode's next turn, and the tokens between (the tool result, the next user message, the
template's markup) are its observation, trained with mask 0, as the agent loop's episodes are.
"""

from __future__ import annotations

import asyncio
import json
import math
import queue
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, StreamingResponse

from rlvr_factory.json_lines import LineError, parse_line
from rlvr_factory.rollout.engine import Engine, Generation, Request, SamplingConfig
from rlvr_factory.rollout.episode import Episode, Turn

SESSION_HEADER = "x-session-id"  # what verifiers' clients send (`verifiers.v1.clients.client.SESSION_ID_HEADER`)


class BadRequest(ValueError):
    """A request the endpoint refuses: HTTP 400 with OpenAI's error body."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class EngineFailed(RuntimeError):
    """The engine raised while sampling a request's batch: HTTP 500 naming the error."""


@dataclass(frozen=True)
class EndpointConfig:
    model_name: str = "policy"  # the id `/v1/models` lists; requests may name any model (there is one)
    max_batch: int = 64  # requests sampled in one engine call at most
    batch_wait_s: float = 0.01  # how long the batcher waits for more requests after the first
    default_max_tokens: int = 256  # a request's token budget when it names none (cut to the context left)
    max_model_len: int | None = None  # context + budget limit; None: the model's position limit


@dataclass
class Call:
    """One sampled turn as the endpoint served it."""

    session: str
    route: str  # chat | generate
    prompt_ids: list[int]
    completion_ids: list[int]  # exactly as sampled, the stop token included when one was sampled
    logprobs: list[float]
    finish_reason: str  # stop | length
    policy_version: int | None = None  # the policy's `version` when it was sampled
    time: float = 0.0


class Recorder:
    """The calls an endpoint served, in order, and (with `path`) appended to a JSONL file as they happen."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path is not None else None  # noqa: SIM115 - closed by close()

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            if self._file is not None:
                self._file.write(json.dumps(asdict(call)) + "\n")
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def sessions(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(c.session for c in self.calls))

    def episodes(self, session: str, decode: Callable[[list[int]], str] | None = None) -> list[Episode]:
        """The session's calls as token-exact episodes (see the module's docstring)."""
        with self._lock:
            calls = [c for c in self.calls if c.session == session]
        return calls_to_episodes(calls, decode)


def calls_to_episodes(calls: Sequence[Call], decode: Callable[[list[int]], str] | None = None) -> list[Episode]:
    """Join calls into episodes: each call continues the latest episode whose tokens its context extends
    (the tokens between become that episode's last observation), or starts one with its context as prompt."""
    decode = decode or (lambda ids: "")
    episodes: list[Episode] = []
    for call in calls:
        episode = next((e for e in reversed(episodes) if _starts_with(call.prompt_ids, e.context_ids)), None)
        if episode is None:
            episode = Episode(task_index=len(episodes), sample_index=0, prompt_ids=list(call.prompt_ids))
            episodes.append(episode)
        else:
            last = episode.turns[-1]
            last.observation_ids = list(call.prompt_ids[len(episode.context_ids):])
            last.observation = decode(last.observation_ids)
        episode.turns.append(Turn(action=decode(call.completion_ids), action_ids=list(call.completion_ids),
                                  logprobs=list(call.logprobs), finish_reason=call.finish_reason))
        episode.finish_reason = call.finish_reason
    return episodes


def _starts_with(tokens: Sequence[int], prefix: Sequence[int]) -> bool:
    return len(tokens) >= len(prefix) and list(tokens[: len(prefix)]) == list(prefix)


# -- sampling ---------------------------------------------------------------------------------------


@dataclass
class _Job:
    context: list[int]
    config: SamplingConfig
    session: str
    future: Future = field(default_factory=Future)


class Batcher:
    """Queued jobs, sampled in batches by whichever thread calls `serve`: one `generate` per sampling setting.

    The engine is only ever called from the thread that serves, the one that owns it: vLLM's CPU kernels
    check that the threads that built a step's metadata and that run it agree, and the transformers
    engine runs with the intra-op threads its owner set."""

    def __init__(self, engine: Engine, config: EndpointConfig) -> None:
        self.engine, self.config = engine, config
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self.batches: list[int] = []  # size of each engine call, for tests and stats

    def submit(self, context: list[int], config: SamplingConfig, session: str) -> Future:
        job = _Job(context, config, session)
        self._queue.put(job)
        return job.future

    def close(self) -> None:
        """End `serve` (after the batch in hand); jobs still queued fail."""
        self._queue.put(None)

    def serve(self, until: Callable[[], bool] = lambda: False, poll_s: float = 0.05) -> None:
        """Sample what is queued, on this thread, until `until()` is true (checked every `poll_s`) or `close`."""
        while not until():
            try:
                first = self._queue.get(timeout=poll_s)
            except queue.Empty:
                continue
            if first is None:
                self._fail_queued()
                return
            jobs, deadline = [first], time.monotonic() + self.config.batch_wait_s
            while len(jobs) < self.config.max_batch:
                try:
                    job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)  # stop after this batch
                    break
                jobs.append(job)
            groups: dict[SamplingConfig, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.config, []).append(job)
            for config, group in groups.items():
                self._run(config, group)

    def _fail_queued(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.future.set_exception(RuntimeError("the endpoint stopped"))

    def _run(self, config: SamplingConfig, jobs: list[_Job]) -> None:
        # An episode's KV cache is found by its key: a session's first job in the batch carries it, so an
        # agent's next turn continues from the cache; a second job of the same session computes its own.
        seen: set[str] = set()
        requests = []
        for job in jobs:
            requests.append(Request(job.context, key=None if job.session in seen else job.session))
            seen.add(job.session)
        self.batches.append(len(jobs))
        try:
            generations, _ = self.engine.generate(requests, config)
        except Exception as e:  # noqa: BLE001 - every waiting request gets the engine's error
            for job in jobs:
                job.future.set_exception(e)
            return
        for job, generation in zip(jobs, generations):
            job.future.set_result(generation)


def cut_at_stop(generation: Generation, stop_ids: set[int], stop_strings: Sequence[str],
                decode: Callable[[list[int]], str]) -> Generation:
    """The generation up to and including the token that completes the first stop (a stop token id, or a stop
    string in the decoded text); unchanged when none occurs. What stays is exactly what was sampled."""
    ids = generation.token_ids
    if not stop_ids.intersection(ids) and not any(s in decode(ids) for s in stop_strings):
        return generation
    for n in range(1, len(ids) + 1):
        if ids[n - 1] in stop_ids or any(s in decode(ids[:n]) for s in stop_strings):
            return Generation(ids[:n], generation.logprobs[:n], "stop")
    return generation


def text_of(generation: Generation, stop_strings: Sequence[str], decode: Callable[[list[int]], str]) -> str:
    """What the client reads: the decoded tokens, without a stop string and what follows it (as OpenAI and vLLM
    answer); the recorded tokens keep the token that completed it, as sampled."""
    text = decode(generation.token_ids)
    cuts = [text.find(s) for s in stop_strings if s in text]
    return text[: min(cuts)] if cuts else text


def _stop_strings(params: dict) -> list[str]:
    stop = params.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > 16:
        raise BadRequest("stop must be a non-empty string or a list of at most 16 of them", "stop")
    return stop


# -- the HTTP app -----------------------------------------------------------------------------------


def _number(body: dict, name: str, default: float, low: float, high: float, integer: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and isinstance(value, float)
                                                                          and not value.is_integer()):
        raise BadRequest(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}", name)
    if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:  # an int is compared exactly
        raise BadRequest(f"{name} must be between {low} and {high}, got {value!r}", name)
    return int(value) if integer else float(value)


class Server:
    """What the routes do, apart from HTTP: rendering, limits, sampling through the batcher, recording."""

    def __init__(self, engine: Engine, tokenizer: Any, config: EndpointConfig | None = None,
                 recorder: Recorder | None = None, version: Callable[[], int | None] | None = None) -> None:
        self.tokenizer, self.config = tokenizer, config or EndpointConfig()
        self.recorder = recorder if recorder is not None else Recorder()
        self.batcher = Batcher(engine, self.config)
        self.version = version or (lambda: getattr(getattr(engine, "policy", None), "version", None))
        self.max_len = self.config.max_model_len or _model_len(engine)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def models(self) -> dict:
        card = {"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "rlvr-factory"}
        if self.max_len:
            card["max_model_len"] = self.max_len
        return {"object": "list", "data": [card]}

    def sampling(self, params: dict, context: list[int]) -> SamplingConfig:
        """The engine's sampling settings for one request; 400 for values out of range or a context too long."""
        budget = params.get("max_completion_tokens", params.get("max_tokens"))
        left = (self.max_len - len(context)) if self.max_len else None
        if left is not None and left < 1:
            raise BadRequest(f"the context is {len(context)} tokens; this model's limit is {self.max_len}", "messages")
        if budget is None:
            budget = min(self.config.default_max_tokens, left) if left is not None else self.config.default_max_tokens
        else:
            name = "max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"
            budget = _number(params, name, 0, 1, 1 << 20, integer=True)
            if left is not None and budget > left:
                raise BadRequest(f"{name}={budget} with a {len(context)}-token context exceeds this model's "
                                 f"limit of {self.max_len} tokens", name)
        seed = params.get("seed")
        if seed is not None:
            seed = _number(params, "seed", 0, -(1 << 63), (1 << 63) - 1, integer=True)
        return SamplingConfig(max_new_tokens=budget, temperature=_number(params, "temperature", 1.0, 0.0, 100.0),
                              top_p=_number(params, "top_p", 1.0, 1e-9, 1.0), seed=seed or 0)

    async def sample(self, context: list[int], config: SamplingConfig, n: int, session: str, route: str,
                     stop_ids: set[int], stop_strings: Sequence[str]) -> list[Generation]:
        if any(not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < len(self.tokenizer) for t in context):
            raise BadRequest(f"token ids must be integers in [0, {len(self.tokenizer)})", "token_ids")
        futures = [self.batcher.submit(context, config, session) for _ in range(n)]
        try:
            generations = [await asyncio.wrap_future(f) for f in futures]
        except Exception as e:  # noqa: BLE001 - whatever the engine raised, the client is told
            raise EngineFailed(f"the engine failed: {type(e).__name__}: {e}") from e
        version = self.version()
        out = []
        for generation in generations:
            generation = cut_at_stop(generation, stop_ids, stop_strings, self.decode)
            self.recorder.add(Call(session, route, list(context), generation.token_ids, generation.logprobs,
                                   generation.finish_reason, version, time.time()))
            out.append(generation)
        return out

    def render(self, body: dict) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list of {role, content} objects", "messages")
        flat = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise BadRequest(f"messages[{i}] must be an object with a role", "messages")
            content = message.get("content")
            if isinstance(content, list):  # content parts: text only
                if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
                    raise BadRequest(f"messages[{i}]: only text content parts are served (this model reads text)",
                                     "messages")
                content = "".join(str(p.get("text", "")) for p in content)
            flat.append({**message, "content": "" if content is None else content})
        if not self.tokenizer.chat_template:
            raise BadRequest("the served tokenizer has no chat template; use /inference/v1/generate with token ids")
        kwargs = {"tools": body["tools"]} if body.get("tools") else {}
        try:
            rendered = self.tokenizer.apply_chat_template(flat, add_generation_prompt=True, tokenize=True, **kwargs)
        except Exception as e:  # noqa: BLE001 - jinja raises anything; the client sent what it cannot render
            raise BadRequest(f"the chat template cannot render these messages: {e}", "messages") from e
        return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)

    async def chat(self, body: dict, session: str) -> tuple[list[int], list[Generation], list[str]]:
        if body.get("top_logprobs") not in (None, 0):
            raise BadRequest("top_logprobs is not served: the engines record the sampled token's log-prob only "
                             "(logprobs: true gives it)", "top_logprobs")
        n = _number(body, "n", 1, 1, 128, integer=True)
        stop = _stop_strings(body)
        context = self.render(body)
        config = self.sampling(body, context)
        generations = await self.sample(context, config, n, session, "chat", set(), stop)
        return context, generations, [text_of(g, stop, self.decode) for g in generations]

    async def generate(self, body: dict, session: str) -> dict:
        context = body.get("token_ids")
        if not isinstance(context, list) or not context:
            raise BadRequest("token_ids must be a non-empty list of token ids", "token_ids")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object", "sampling_params")
        n = _number(params, "n", 1, 1, 128, integer=True)
        stop_ids = params.get("stop_token_ids") or []
        if not isinstance(stop_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
            raise BadRequest("stop_token_ids must be a list of token ids", "stop_token_ids")
        stop = _stop_strings(params)
        if any(not isinstance(t, int) or isinstance(t, bool) for t in context):
            raise BadRequest("token_ids must be a list of integers", "token_ids")
        config = self.sampling(params, context)
        generations = await self.sample(context, config, n, session, "generate", set(stop_ids), stop)
        return {
            "request_id": body.get("request_id") or f"gen-{uuid.uuid4().hex}",
            "prompt_token_ids": context,
            "choices": [{"index": i, "token_ids": g.token_ids, "finish_reason": g.finish_reason,
                         "logprobs": {"content": [{"token": f"token_id:{t}", "logprob": p}
                                                  for t, p in zip(g.token_ids, g.logprobs)]}}
                        for i, g in enumerate(generations)],
            "usage": {"prompt_tokens": len(context), "completion_tokens": sum(len(g.token_ids) for g in generations),
                      "total_tokens": len(context) + sum(len(g.token_ids) for g in generations)},
        }

    def close(self) -> None:
        self.batcher.close()
        self.recorder.close()


def _model_len(engine: Engine) -> int | None:
    from rlvr_factory.models.policy import max_positions

    policy = getattr(engine, "policy", None)
    return max_positions(policy.model.config) if policy is not None else None


def _logprobs(server: Server, generation: Generation) -> dict:
    return {"content": [{"token": server.tokenizer.convert_ids_to_tokens(t), "logprob": p,
                         "bytes": list(server.decode([t]).encode()), "top_logprobs": []}
                        for t, p in zip(generation.token_ids, generation.logprobs)]}


def build_app(server: Server):
    """The FastAPI app of `server`'s routes."""
    app = FastAPI(title="RLVR Factory policy endpoint")

    def error(status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": None}}, status)

    async def body_of(request: HTTPRequest) -> dict:
        try:  # bounded: no NaN or Infinity, no integer of 1000+ digits, no nesting past the recursion limit
            body = parse_line(await request.body(), 1)
        except LineError as e:
            raise BadRequest(f"the body is refused: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def session_of(request: HTTPRequest, body: dict) -> str:
        return request.headers.get(SESSION_HEADER) or (body.get("user") if isinstance(body.get("user"), str) else None) \
            or f"call-{uuid.uuid4().hex}"

    @app.exception_handler(BadRequest)
    async def bad_request(_, e: BadRequest):
        return error(400, str(e), e.param)

    @app.exception_handler(EngineFailed)
    async def failure(_, e: EngineFailed):
        return error(500, str(e), kind="server_error")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return server.models()

    @app.post("/inference/v1/generate")
    async def generate(request: HTTPRequest):
        body = await body_of(request)
        return await server.generate(body, session_of(request, body))

    @app.post("/v1/chat/completions")
    async def chat(request: HTTPRequest):
        body = await body_of(request)
        context, generations, texts = await server.chat(body, session_of(request, body))
        with_logprobs = bool(body.get("logprobs"))
        ident, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.get("model") or server.config.model_name
        tokens = body.get("return_token_ids") is True
        usage = {"prompt_tokens": len(context), "completion_tokens": sum(len(g.token_ids) for g in generations),
                 "total_tokens": len(context) + sum(len(g.token_ids) for g in generations)}
        if not body.get("stream"):
            choices = []
            for i, g in enumerate(generations):
                choice = {"index": i, "message": {"role": "assistant", "content": texts[i]},
                          "finish_reason": g.finish_reason, "logprobs": _logprobs(server, g) if with_logprobs else None}
                if tokens:
                    choice["token_ids"] = g.token_ids
                choices.append(choice)
            response = {"id": ident, "object": "chat.completion", "created": created, "model": model,
                        "choices": choices, "usage": usage}
            if tokens:
                response["prompt_token_ids"] = context
            return response
        include_usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")

        def chunk(choices: list, **extra) -> str:
            return "data: " + json.dumps({"id": ident, "object": "chat.completion.chunk", "created": created,
                                          "model": model, "choices": choices, **extra}) + "\n\n"

        def events():
            for i, g in enumerate(generations):
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
                sent, done = "", 0  # text sent, tokens sent
                for k in range(1, len(g.token_ids) + 1):  # a token at a time; a partial UTF-8 character waits
                    text = server.decode(g.token_ids[:k])
                    if text.endswith("\ufffd") and k < len(g.token_ids):
                        continue
                    text = texts[i][: len(text)]  # a stop string is not sent
                    delta = {"index": i, "delta": {"content": text[len(sent):]}, "finish_reason": None}
                    if with_logprobs:
                        delta["logprobs"] = _logprobs(server, Generation(g.token_ids[done:k], g.logprobs[done:k], ""))
                    if tokens:
                        delta["token_ids"] = g.token_ids[done:k]
                    sent, done = text, k
                    yield chunk([delta])
                yield chunk([{"index": i, "delta": {}, "finish_reason": g.finish_reason}])
            if include_usage:
                yield chunk([], usage=usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


class Endpoint:
    """`Server`'s app served by uvicorn on a thread, on 127.0.0.1 (port 0: a free one); the engine samples on
    the thread that calls `run` or `serve_forever`.

        def agent():
            client = openai.OpenAI(base_url=endpoint.url + "/v1", api_key="none")
            return client.chat.completions.create(model="policy", messages=[...])

        with Endpoint(engine, tokenizer) as endpoint:
            reply = endpoint.run(agent)
    """

    def __init__(self, engine: Engine, tokenizer: Any, config: EndpointConfig | None = None,
                 recorder: Recorder | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = Server(engine, tokenizer, config, recorder)
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = host, self.socket.getsockname()[1]
        self._uvicorn = uvicorn.Server(uvicorn.Config(build_app(self.server), log_level="warning", lifespan="off"))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def recorder(self) -> Recorder:
        return self.server.recorder

    def start(self) -> "Endpoint":
        """Accept HTTP requests (uvicorn on a thread); they are sampled while a thread runs `run` or `serve_forever`."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self.socket]},
                                        name="endpoint-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the endpoint did not start on {self.url}")
            time.sleep(0.01)
        return self

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call `fn(*args, **kwargs)` on a new thread (the agent code: it calls this endpoint) while this thread, the
        engine's, samples its requests; `fn`'s result, or its exception raised here."""
        self.start()
        result: Future = Future()

        def call() -> None:
            try:
                result.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller as is
                result.set_exception(e)

        threading.Thread(target=call, name="endpoint-client", daemon=True).start()
        self.server.batcher.serve(until=result.done)
        return result.result()

    def serve_forever(self) -> None:
        """Serve until interrupted (Ctrl-C), sampling on this thread."""
        self.start()
        try:
            self.server.batcher.serve()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.server.close()
        self.socket.close()

    def __enter__(self) -> "Endpoint":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
