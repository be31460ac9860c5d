"""The aiohttp application: generation handlers (timing, faults, queueing), metrics, test endpoints.

Over 400 lines: the completions and chat handlers share the fault, queueing and streaming code that makes the
test server behave like vLLM; the pure parts already live in answers.py, protocol.py, metrics.py and state.py.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_writer import StreamWriter

from evalkit.testing.answers import TOKEN_RE, last_user_text
from evalkit.testing.hostile import PING, PING_INTERVAL_S, gzip_bomb
from evalkit.testing.protocol import ApiError, Encoder, Job, parse_job
from evalkit.testing.scored import prompt_text, token_id
from evalkit.testing.state import RecordedRequest, ServerState, is_warmup, validate_fault

STATE_KEY = web.AppKey("evalkit_test_state", ServerState)

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}
_HTML = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
_DONE = b"data: [DONE]\n\n"


def error_response(
    status: int, message: str, type_: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body = {
        "error": {
            "message": message,
            "type": type_ or _ERROR_TYPES.get(status, "APIError"),
            "param": None,
            "code": status,
        }
    }
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


# -------------------------------------------------------------------------------------------- handlers


def _auth(state: ServerState, request: web.Request) -> web.Response | None:
    b = state.behaviour
    if b.api_key is not None:
        wanted = f"Bearer {b.api_key}"
    elif b.basic_auth is not None:
        wanted = "Basic " + base64.b64encode(b.basic_auth.encode()).decode()
    else:
        return None
    if request.headers.get("Authorization", "") != wanted:
        return error_response(401, "Unauthorized", "AuthenticationError")
    return None


@web.middleware
async def _front(request: web.Request, handler: Any) -> web.StreamResponse:
    """Notes every request in ``state.seen``; answers ``Behaviour.redirect``'s paths (all when it names none)
    with a redirect of its status to the same path and query at its ``to`` origin, and ``Behaviour.gzip_bomb``'s
    paths with its gzip bomb."""
    state = request.app[STATE_KEY]
    state.seen.append((request.method, request.path, dict(request.headers)))
    r = state.behaviour.redirect
    if r is not None and (not r.get("paths") or request.path in r["paths"]):
        return web.Response(status=int(r.get("status", 307)), headers={"Location": r["to"] + request.path_qs})
    bomb = state.behaviour.gzip_bomb
    if bomb is not None and request.path in bomb.get("paths", ()):
        body = gzip_bomb(int(bomb["bytes"]))
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    response: web.StreamResponse = await handler(request)
    return response


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    loop = asyncio.get_running_loop()
    arrival = loop.time()
    denied = _auth(state, request)
    if denied is not None:
        return denied
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return error_response(400, f"Invalid JSON body: {e}")
    if not isinstance(body, dict):
        return error_response(400, "The request body must be a JSON object")
    rec = RecordedRequest(
        path=request.path,
        body=body,
        headers={str(k): str(v) for k, v in request.headers.items()},
        time=time.time(),
    )
    if chat and isinstance(body.get("messages"), list):
        rec.prompts = [last_user_text([m for m in body["messages"] if isinstance(m, dict)])]
    elif not chat:
        p = body.get("prompt")
        if isinstance(p, str):
            rec.prompts = [p]
        elif isinstance(p, list):
            rec.prompts = [x for x in p if isinstance(x, str)]
    state.record(rec)
    try:
        try:
            fault = None if is_warmup(rec.headers) else state.next_fault()
        except ValueError as e:
            rec.status = 500
            return error_response(500, f"bad test fault: {e}")
        rec.fault = fault
        fault = fault or {}
        if fault.get("delay_s"):
            await asyncio.sleep(float(fault["delay_s"]))
        if fault.get("html"):
            rec.status = int(fault.get("status", 200))
            return web.Response(status=rec.status, text=_HTML, content_type="text/html")
        if "status" in fault:
            rec.status = int(fault["status"])
            headers = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else None
            msg = fault.get("message") or f"injected fault: HTTP {rec.status}"
            if fault.get("echo_auth"):  # as some gateways do: the credentials quoted back in the message
                msg += f" (request had Authorization: {request.headers.get('Authorization', '')})"
            return error_response(rec.status, msg, fault.get("type"), headers)
        if fault.get("hostile") == "ping_only":
            return await _ping_only(request, rec, float(fault.get("stall_s") or 3600.0))
        if state.behaviour.fast:
            cached = state.cache.get(_fast_key(state, raw, chat, fault))
            if cached is not None:
                return await _send_fast(request, state, rec, cached)
        try:
            job = parse_job(state, body, chat)
        except ApiError as e:
            rec.status = e.status
            return error_response(e.status, e.message, e.type)
        except (TypeError, ValueError) as e:
            rec.status = 400
            return error_response(400, str(e))
        if state.behaviour.fast:
            return await _fast(request, state, job, rec, _fast_key(state, raw, chat, fault), fault)
        return await _run(request, state, job, rec, fault, arrival)
    finally:
        state.done()


async def _ping_only(request: web.Request, rec: RecordedRequest, seconds: float) -> web.StreamResponse:
    """Event-stream headers, then only SSE comments for ``seconds``; then the stream ends with no finish."""
    loop = asyncio.get_running_loop()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await resp.prepare(request)
    rec.status = 200
    deadline = loop.time() + seconds
    try:
        while loop.time() < deadline:
            await resp.write(PING)
            await asyncio.sleep(PING_INTERVAL_S)
        await resp.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        rec.aborted = True
        raise
    rec.end_time = time.time()
    return resp


async def _run(
    request: web.Request,
    state: ServerState,
    job: Job,
    rec: RecordedRequest,
    fault: dict[str, Any],
    arrival: float,
) -> web.StreamResponse:
    b, m, metrics = state.behaviour, job.model, state.metrics
    loop = asyncio.get_running_loop()
    resp: web.StreamResponse | None = None
    if job.stream:  # as vLLM: a streamed request's headers at once, its first event once it is scheduled
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        writer = await resp.prepare(request)
        if isinstance(writer, StreamWriter):
            writer.send_headers()
        rec.status = 200
    await state.acquire(m)
    ptoks = sum(len(t) for t in job.prompt_tokens)
    metrics.gauge_add(m, running=1, kv_tokens=ptoks)
    kv_held = ptoks
    t0 = loop.time()
    metrics.observe(m, "vllm:request_queue_time_seconds", t0 - arrival)
    _first_of_config(state, rec.body, t0)
    metrics.inc(m, "vllm:prompt_tokens", ptoks)
    for toks in job.prompt_tokens:
        metrics.prefix_cache(m, toks)
    enc = Encoder(state, job, bool(fault.get("null_content")), fault.get("hostile"), fault.get("model"))
    drop = fault.get("drop_after_tokens")
    stall_s = float(fault.get("stall_s") or 0.0)
    stall_after = int(fault.get("after_tokens") or 0)
    ttft, itl = b.ttft_s, b.itl_s
    nsteps = max(len(p.steps) for p in job.plans)
    produced = [0] * len(job.plans)
    last_sent: list[float | None] = [None] * len(job.plans)
    finished = [False] * len(job.plans)
    due = t0 + ttft  # when the next chunk is sent
    try:
        for j in range(nsteps + 1):
            sent = max(produced)
            if drop is not None and (sent >= int(drop) or j == nsteps):
                rec.aborted = True
                for ci in range(len(job.plans)):
                    finished[ci] = True
                    metrics.finished(m, "abort")
                _abort(request)
                return resp if resp is not None else web.Response(status=200)
            if j == nsteps:
                break
            if stall_s and sent >= stall_after:
                due += stall_s
                stall_s = 0.0
            await _sleep_until(due)
            while state.stall_until > loop.time():  # the engine is stalled (a first batch compiling): all wait
                pause = state.stall_until - loop.time()
                await asyncio.sleep(pause)
                due += pause
            # a compute-bound engine: beyond batch_knee running requests, each step takes proportionally longer
            # (knee_power 1: throughput flat; above 1 it falls, as when a server thrashes its KV cache)
            knee = b.batch_knee
            due += itl * (max(1.0, state.running / knee) ** b.knee_power if knee else 1.0)
            now = loop.time()
            chunks: list[bytes] = []
            if j == 0:
                rec.first_token_time = time.time()
                metrics.observe(m, "vllm:time_to_first_token_seconds", now - arrival)
                if job.chat and resp is not None:
                    chunks.extend(enc.role(p.index) for p in job.plans)
            new_tokens = 0
            for ci, plan in enumerate(job.plans):
                if j >= len(plan.steps):
                    continue
                st = plan.steps[j]
                produced[ci] += st.ntokens
                new_tokens += st.ntokens
                final = j == len(plan.steps) - 1
                if resp is not None and (st.text or final or enc.null):
                    chunks.append(enc.step(plan, j, produced[ci]))
                prev = last_sent[ci]
                if prev is not None:
                    gap = now - prev
                    metrics.observe(m, "vllm:inter_token_latency_seconds", gap)
                    metrics.observe(m, "vllm:time_per_output_token_seconds", gap)
                last_sent[ci] = now
            metrics.inc(m, "vllm:generation_tokens", new_tokens)
            metrics.gauge_add(m, kv_tokens=new_tokens)
            kv_held += new_tokens
            if resp is not None and chunks:
                await resp.write(b"".join(chunks))
        out: web.StreamResponse
        if resp is None:
            out = _json(enc.full())
            rec.status = 200
        else:
            tail = (enc.final_usage() if job.include_usage else b"") + _DONE
            await resp.write(tail)
            await resp.write_eof()
            out = resp
        end = loop.time()
        first = t0 + ttft
        for ci, plan in enumerate(job.plans):
            finished[ci] = True
            metrics.finished(m, plan.finish_reason)
            metrics.observe(m, "vllm:e2e_request_latency_seconds", end - arrival)
            if plan.completion_tokens > 1:
                tpot = (end - first) / (plan.completion_tokens - 1)
                metrics.observe(m, "vllm:request_time_per_output_token_seconds", max(0.0, tpot))
        rec.completed = True
        rec.end_time = time.time()
        return out
    except (ConnectionError, asyncio.CancelledError):
        rec.aborted = True
        for ci in range(len(job.plans)):
            if not finished[ci]:
                metrics.finished(m, "abort")
        raise
    finally:
        metrics.gauge_add(m, running=-1, kv_tokens=-kv_held)
        state.release()


def _first_of_config(state: ServerState, body: dict[str, Any], now: float) -> None:
    """``first_batch_stall_s``: the first request of a sampling config not seen before stalls the engine."""
    stall = state.behaviour.first_batch_stall_s
    if not stall:
        return
    key = tuple(body.get(k) for k in ("temperature", "top_p", "top_k", "min_p"))
    if key not in state.sampling_seen:
        state.sampling_seen.add(key)
        state.stall_until = max(state.stall_until, now + stall)


def _fast_key(state: ServerState, raw: bytes, chat: bool, fault: dict[str, Any] | None) -> tuple[Any, ...]:
    b = state.behaviour
    settings = (b.correct_ratio, b.reasoning, b.reasoning_field, b.tokens_per_chunk, b.max_model_len, b.tool_variant,
                b.logit_scale, b.logit_noise, b.logit_noise_seed)  # fmt: skip
    return (raw, chat, repr(sorted((fault or {}).items())), settings, tuple(b.models), id(b.answer_fn))


@dataclass(frozen=True)
class _Prebuilt:
    model: str
    stream: bool
    payload: bytes
    prompt_tokens: int
    finishes: tuple[tuple[str, int], ...]  # (finish_reason, completion_tokens) per choice


async def _fast(
    request: web.Request,
    state: ServerState,
    job: Job,
    rec: RecordedRequest,
    key: tuple[Any, ...],
    fault: dict[str, Any],
) -> web.StreamResponse:
    """Fast mode: the whole response is serialized once per distinct request (and behaviour)."""
    enc = Encoder(state, job, bool(fault.get("null_content")), fault.get("hostile"), fault.get("model"))
    if job.stream:
        parts: list[bytes] = []
        if job.chat:
            parts.extend(enc.role(p.index) for p in job.plans)
        for plan in job.plans:
            total = 0
            for j, st in enumerate(plan.steps):
                total += st.ntokens
                if st.text or j == len(plan.steps) - 1 or enc.null:
                    parts.append(enc.step(plan, j, total))
        if job.include_usage:
            parts.append(enc.final_usage())
        parts.append(_DONE)
        payload = b"".join(parts)
    else:
        payload = orjson.dumps(enc.full())
    pre = _Prebuilt(
        model=job.model,
        stream=job.stream,
        payload=payload,
        prompt_tokens=sum(len(t) for t in job.prompt_tokens),
        finishes=tuple((p.finish_reason, p.completion_tokens) for p in job.plans),
    )
    if len(state.cache) > 4096:
        state.cache.clear()
    state.cache[key] = pre
    return await _send_fast(request, state, rec, pre)


async def _send_fast(
    request: web.Request, state: ServerState, rec: RecordedRequest, pre: _Prebuilt
) -> web.StreamResponse:
    metrics = state.metrics
    metrics.inc(pre.model, "vllm:prompt_tokens", pre.prompt_tokens)
    metrics.inc(pre.model, "vllm:generation_tokens", sum(t for _, t in pre.finishes))
    for reason, _ in pre.finishes:
        metrics.finished(pre.model, reason)
    rec.status = 200
    resp: web.StreamResponse
    if pre.stream:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        await resp.write(pre.payload)
        await resp.write_eof()
    else:
        resp = web.Response(body=pre.payload, content_type="application/json")
    rec.completed = True
    rec.first_token_time = rec.end_time = time.time()
    return resp


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _version(request: web.Request) -> web.Response:
    return _json({"version": "evalkit-test"})


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    denied = _auth(state, request)
    if denied is not None:
        return denied
    b = state.behaviour
    created = int(time.time())
    data: list[dict[str, Any]] = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "evalkit-test",
            "root": name,
            "parent": None,
            "max_model_len": b.max_model_len,
            "permission": [],
        }
        for name in b.models
    ]
    return _json({"object": "list", "data": data})


SPECIAL_TOKEN = "<|endoftext|>"  # the test model's BOS and EOS token (its id is that text's, as /tokenize gives it)


async def _tokenizer_info(request: web.Request) -> web.Response:
    """vLLM's ``GET /tokenizer_info`` (``--enable-tokenizer-info-endpoint``): the tokenizer's special tokens, which
    lm-eval's rolling requests need as their prefix token."""
    state = request.app[STATE_KEY]
    return _json(
        {
            "tokenizer_class": "TestServerTokenizer",
            "bos_token": SPECIAL_TOKEN,
            "eos_token": SPECIAL_TOKEN,
            "model_max_length": state.behaviour.max_model_len,
        }
    )


async def _tokenize(request: web.Request) -> web.Response:
    """vLLM's ``POST /tokenize`` (unguarded by the API key, as in vLLM): same counting as ``usage``."""
    state = request.app[STATE_KEY]
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as e:
        return error_response(400, f"Invalid JSON body: {e}")
    if not isinstance(body, dict):
        return error_response(400, "The request body must be a JSON object")
    model = body.get("model") or state.behaviour.models[0]
    if model not in state.behaviour.models:
        return error_response(404, f"The model `{model}` does not exist.", "NotFoundError")
    text = prompt_text(body, chat=False)
    if text is None:
        return error_response(400, "send `prompt` (a string) or `messages`")
    strs = TOKEN_RE.findall(text)
    return _json(
        {
            "count": len(strs),
            "max_model_len": state.behaviour.max_model_len,
            "tokens": [token_id(t) for t in strs],
            "token_strs": strs if body.get("return_token_strs") else None,
        }
    )


async def _reset_prefix_cache(request: web.Request) -> web.Response:
    """vLLM's ``POST /reset_prefix_cache``: only with ``Behaviour.dev_mode`` (vLLM: VLLM_SERVER_DEV_MODE=1)."""
    state = request.app[STATE_KEY]
    if not state.behaviour.dev_mode:
        return _json({"detail": "Not Found"}, status=404)
    state.metrics.reset_prefix_cache()
    state.prefix_cache_resets += 1
    return _json({"success": True})


async def _metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    b = state.behaviour
    text = state.metrics.render(list(b.models), b.max_model_len * (b.max_num_seqs or 16))
    return web.Response(body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


# ------------------------------------------------------------------------------------- test endpoints


async def _test_requests(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return _json([r.to_dict() for r in state.requests])


async def _test_faults(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if request.method == "POST":
        try:
            faults = orjson.loads(await request.read())
            if not isinstance(faults, list):
                raise ValueError("POST a JSON list of faults")
            for f in faults:
                validate_fault(f)
        except (orjson.JSONDecodeError, ValueError) as e:
            return error_response(400, str(e))
        state.faults[:] = faults
    return _json(state.faults)


async def _test_behaviour(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if request.method == "POST":
        try:
            changes = orjson.loads(await request.read())
            if not isinstance(changes, dict) or "answer_fn" in changes:
                raise ValueError("POST a JSON object of Behaviour fields (answer_fn cannot be set over HTTP)")
            state.behaviour.update(**changes)
        except (orjson.JSONDecodeError, ValueError) as e:
            return error_response(400, str(e))
        state.wake()
    return _json(state.behaviour.to_dict())


async def _test_reset(request: web.Request) -> web.Response:
    request.app[STATE_KEY].reset()
    return _json({"ok": True})


async def _test_stats(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return _json({"max_concurrency_seen": state.max_concurrency_seen, "inflight": state.inflight})


def build_app(state: ServerState) -> web.Application:
    app = web.Application(client_max_size=64 * 1024**2, middlewares=[_front])
    app[STATE_KEY] = state
    app.router.add_get("/health", _health)
    app.router.add_get("/version", _version)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_get("/tokenizer_info", _tokenizer_info)
    app.router.add_post("/reset_prefix_cache", _reset_prefix_cache)
    app.router.add_get("/_test/requests", _test_requests)
    app.router.add_route("*", "/_test/faults", _test_faults)
    app.router.add_route("*", "/_test/behaviour", _test_behaviour)
    app.router.add_post("/_test/reset", _test_reset)
    app.router.add_get("/_test/stats", _test_stats)
    return app


__all__ = ["STATE_KEY", "build_app", "error_response"]
