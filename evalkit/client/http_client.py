"""The one HTTP client: sends a request, streams the answer, times it, retries it.

Over 400 lines: one attempt's read of the stream (timing, checks and bounds on what the server sends) is one loop,
kept together for the per-chunk cost, beside the retries and the dispatch over endpoints.

Timing follows vLLM's ``vllm/benchmarks/serve.py``: ``time.perf_counter()`` from just before the request is
first sent (a re-sent request's TTFT and E2E include its failed attempts and their backoff, which the Response
gives apart as ``retry_lost_s``); TTFT at the first chunk that carries generated text (content, reasoning, or a
piece of a tool call: its name or arguments, which is where a tool-calling answer's tokens arrive); ITL between
such chunks; TPOT = (latency - TTFT) / (output_tokens - 1) with output tokens from the final ``usage`` chunk
(``stream_options.include_usage``).

Timeouts: :mod:`evalkit.client.timeouts` (a request waiting its turn is bounded by the TTFT timeout, not re-sent).

The hot path reads SSE lines from aiohttp and parses each ``data:`` payload with orjson, not through the
``openai`` package's chunk iterator, whose CPU per token would distort timings on a fast server
(docs/benchmarks.md). Retries live here and only here (:meth:`Client.generate`'s loop), and the SDK's own
retries are never used for generation.

What the server sends is checked off the per-chunk path: text pieces are joined once at the end (a piece that
is not a string fails the attempt as a malformed event), ``finish_reason`` and ``usage`` are checked once per
request (a count that is not a plausible token count is dropped with a note, see :func:`read_usage`). The idle
timeout runs between ``data:`` events: SSE comments (``: ping``) do not reset it.

What the server sends is bounded and cleaned where it enters: a stream is read up to
:func:`evalkit.limits.max_stream_bytes` of its ``max_tokens`` and an error body up to
``MAX_ERROR_BODY_BYTES`` (its message cut to ``MESSAGE_CHARS``); every error text and note is redacted
(:func:`evalkit.redact.redact_text`: the key, URL credentials and header secrets this client sends, and
credentials by their shape), and the answer's texts lose any of those literal secrets. With ``models`` given,
a chunk whose ``model`` is neither the run's model nor one of ``models`` (the ids the endpoint lists) fails the
attempt, which is retried like a dropped connection (behind a load balancer the next attempt may reach another
replica).
"""

from __future__ import annotations

import asyncio
import errno
import random
import time
from collections.abc import Collection, Sequence
from typing import Any

import aiohttp
import orjson
from aiohttp.http_exceptions import LineTooLong

from evalkit.client.answer_fields import length_note, retry_after
from evalkit.client.model_discovery import redirect_error
from evalkit.client.scored_answer import MalformedAnswer, max_scored_bytes, read_scored_answer
from evalkit.client.timeouts import ClientOptions, Deadline, timeout_message
from evalkit.client.tool_stream import ToolCallAssembler
from evalkit.config.endpoint import credentials, display_url
from evalkit.contracts import Request, Response
from evalkit.limits import MAX_ERROR_BODY_BYTES, BodyTooLarge, max_stream_bytes, size_text
from evalkit.redact import redact_secrets, redact_text, secrets_of
from evalkit.server.http_reads import read_capped

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
TOOLS_REFUSED = (
    "the server refused a request with `tools`: start vLLM with --enable-auto-tool-choice and a --tool-call-parser "
    "that fits the model (evalkit --serve takes both)"
)
OUT_OF_DESCRIPTORS = (
    "client error: evalkit's process ran out of file descriptors (Too many open files), not a server failure; "
    "raise its limit (ulimit -n) or lower --concurrency"
)


class RequestFailed(Exception):
    """A request failed in a way that retrying may fix (timeouts, dropped connections, 408/409/429/5xx)."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RequestTimedOut(Exception):
    """No first event (or non-streamed answer) within its bound: not re-sent, it would queue again at the back."""

    status = None


class RequestRejected(Exception):
    """The server refused the request (400/401/403/404/422...): retrying cannot help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


MAX_PROMPT_TOKENS = 2**31 - 1
USAGE_SLACK = 2  # completion (and reasoning) tokens may be at most this many times max_tokens
MESSAGE_CHARS = 500  # of a server's error message


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _clip(text: str, most: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


def _join(parts: list[Any], what: str) -> str | None:
    """The streamed pieces as one string (None: no pieces); a piece that is not a string is a malformed event."""
    if not parts:
        return None
    try:
        return "".join(parts)
    except TypeError:
        bad = next(p for p in parts if not isinstance(p, str))
        kind = type(bad).__name__
        raise RequestFailed(f"malformed event from server: {what} {_show(bad)} is {kind}, not a string") from None


def read_usage(usage: Any, max_tokens: int) -> tuple[dict[str, int | None], str | None]:
    """Token counts from a ``usage`` object, each None where absent or not a count (an int from 0 to
    ``MAX_PROMPT_TOKENS`` for the prompt, to ``USAGE_SLACK * max_tokens`` for completion and reasoning), and a
    note naming what was ignored (None: nothing was)."""
    counts: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": None, "reasoning_tokens": None}
    if usage is None:
        return counts, None
    if not isinstance(usage, dict):
        return counts, f"usage ignored: {_show(usage)} is not an object"
    details = usage.get("completion_tokens_details")
    bad = [] if details is None or isinstance(details, dict) else [f"completion_tokens_details={_show(details)}"]
    limit = USAGE_SLACK * max_tokens
    found = {
        "prompt_tokens": (usage.get("prompt_tokens"), MAX_PROMPT_TOKENS),
        "completion_tokens": (usage.get("completion_tokens"), limit),
        "reasoning_tokens": (details.get("reasoning_tokens") if isinstance(details, dict) else None, limit),
    }
    for name, (value, most) in found.items():
        if type(value) is int and 0 <= value <= most:
            counts[name] = value
        elif value is not None:
            bad.append(f"{name}={_show(value)} (not an integer from 0 to {most})")
    return counts, f"usage ignored: {'; '.join(bad)}" if bad else None


def _error_message(status: int, body: bytes) -> str:
    """``HTTP status: message`` from an error body (its message cut to MESSAGE_CHARS, whitespace folded)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = orjson.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("detail") or err)
        elif isinstance(obj, dict) and "detail" in obj:
            text = str(obj["detail"])
    except orjson.JSONDecodeError:
        text = " ".join(text.split())[:200]
    return f"HTTP {status}: {_clip(' '.join(text.split()))}"


class Client:
    """Async streaming client for an OpenAI-compatible server (completions or chat), over one endpoint or
    several serving the same model (a sharded run).

    With several endpoints each attempt goes to the one with the fewest requests outstanding (ties: round
    robin), and a retry goes to another one where there is one: a request in its backoff stays counted against
    the endpoint that failed it, so a failing endpoint gets fewer new requests while the others take the load.

    Example::

        async with Client("http://127.0.0.1:8000/v1", "my-model", kind="completions") as c:
            resp = await c.generate(request)
    """

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        kind: str = "completions",
        api_key: str | None = None,
        options: ClientOptions | None = None,
        extra_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        models: Collection[str] | None = None,
    ) -> None:
        """``models``: the ids a response's ``model`` may name besides ``model`` (None: any id is accepted)."""
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        path = "/chat/completions" if kind == "chat" else "/completions"
        self.endpoints = [display_url(u) for u in urls]  # what records name: no credentials
        self._targets: list[tuple[str, dict[str, str]]] = []
        for u in urls:
            bare, auth = credentials(u, api_key)  # user:password@ or the API key -> Authorization
            sent = {"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {}), **auth}
            self._targets.append((bare.rstrip("/") + path, sent))
        self.url, self._headers = self._targets[0]
        self._secrets = secrets_of(api_key, urls, {k: v for _, h in self._targets for k, v in h.items()})
        self.accepted = None if models is None else frozenset({model, *models})
        self.outstanding = [0] * len(urls)  # attempts in flight or in backoff, per endpoint
        self._turn = 0  # round robin among the least loaded
        self.model = model
        self.kind = kind
        self.options = options or ClientOptions()
        self.extra_body = dict(extra_body or {})
        self._session: aiohttp.ClientSession | None = None
        self.t0 = time.perf_counter()
        self.chunks_received = 0  # text-carrying chunks so far, for throughput-driven concurrency
        self.first_tokens = 0  # requests (attempts) that got their first generated text so far

    def _dispatch(self, failed: int | None) -> int:
        """The endpoint for the next attempt: the least outstanding (ties: the next in round robin), another
        than ``failed`` (the one the previous attempt failed on) where there is one; moves the request's count
        from ``failed`` to it."""
        n = len(self.outstanding)
        choices = [i for i in range(n) if i != failed] or [failed or 0]
        least = min(self.outstanding[i] for i in choices)
        order = [(self._turn + k) % n for k in range(n)]
        pick = next(i for i in order if i in choices and self.outstanding[i] == least)
        self._turn = (pick + 1) % n
        if failed is not None:
            self.outstanding[failed] -= 1
        self.outstanding[pick] += 1
        return pick

    async def __aenter__(self) -> Client:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        self.t0 = time.perf_counter()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    # -- payload -----------------------------------------------------------------------------------------
    def payload(self, req: Request) -> dict[str, Any]:
        g = req.gen
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": g.max_tokens,
            "temperature": g.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if g.scored:  # vLLM sends a prompt's logprobs only without streaming (evalkit.client.scored_answer)
            body.update(stream=False, return_token_ids=True, echo=g.echo)
            del body["stream_options"]
            scored = {"prompt_logprobs": g.prompt_logprobs, "logprobs": g.logprobs}
            body.update({k: v for k, v in scored.items() if v is not None})
        if self.kind == "chat":
            body["messages"] = list(req.messages) if req.messages else [{"role": "user", "content": req.prompt}]
            if g.scored and body["messages"][-1].get("role") == "assistant":  # score the reply as written
                body.update(continue_final_message=True, add_generation_prompt=False)
        else:
            body["prompt"] = list(req.prompt_ids) if req.prompt_ids is not None else req.prompt
        if g.top_p is not None:
            body["top_p"] = g.top_p
        if g.seed is not None:
            body["seed"] = g.seed
        if g.stop:
            body["stop"] = list(g.stop)
        if g.min_tokens is not None:
            body["min_tokens"] = g.min_tokens
        if g.ignore_eos:
            body["ignore_eos"] = True
        if g.chat_template_kwargs and self.kind == "chat":
            body["chat_template_kwargs"] = g.chat_template_kwargs
        if req.tools is not None and self.kind == "chat":
            body["tools"] = list(req.tools)
            body["tool_choice"] = req.tool_choice or "auto"
        body.update(self.extra_body)
        return body

    # -- one attempt -------------------------------------------------------------------------------------
    async def _once(
        self, req: Request, body: bytes, endpoint: int = 0, st: float | None = None, since: float | None = None
    ) -> Response:
        """One attempt sent at ``st`` (None: now); latencies count from ``since``, the first send (None: ``st``)."""
        assert self._session is not None, "use 'async with Client(...)'"
        url, headers = self._targets[endpoint]
        o = self.options
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=o.connect_timeout_s, sock_read=None)
        chat = self.kind == "chat"
        loop = asyncio.get_running_loop()
        st = time.perf_counter() if st is None else st
        since = st if since is None else since
        first_bound = o.first_event_timeout(req)
        answer_end = 0.0  # the loop time by which a streamed answer must end, set at its first event
        text_parts: list[str] = []
        reasoning_parts: list[str] = []
        itl: list[float] = []
        ttft: float | None = None
        last = seen = st  # last text-carrying chunk, last data event
        finish: Any = None
        usage: Any = None
        text: str | None = None
        reasoning: str | None = None
        scored: dict[str, Any] | None = None
        tools = ToolCallAssembler()
        accepted, received, most = self.accepted, 0, max_stream_bytes(req.gen.max_tokens)
        timer = Deadline(loop.time() + first_bound)
        try:
            async with (
                timer,
                self._session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False) as resp,
            ):
                if 300 <= resp.status < 400:  # never followed: it may take the key elsewhere, or the POST as a GET
                    where = resp.headers.get("Location")
                    raise RequestRejected(redirect_error(resp.status, where, url), resp.status)
                if resp.status != 200:
                    raw = await read_capped(resp, MAX_ERROR_BODY_BYTES, cut=True)
                    msg = _error_message(resp.status, raw)
                    if resp.status in RETRYABLE_STATUS:
                        raise RequestFailed(msg, resp.status, retry_after(resp.headers))
                    if resp.status == 400 and req.tools is not None and "tool" in msg.lower():
                        msg = f"{msg} ({TOOLS_REFUSED})"
                    raise RequestRejected(msg, resp.status)
                ctype = resp.headers.get("Content-Type", "")
                if req.gen.scored:
                    raw = await read_capped(resp, max_scored_bytes(req.gen.max_tokens))
                    answer = read_scored_answer(raw, self.model, accepted)
                    text, finish, usage, scored = answer.text, answer.finish_reason, answer.usage, answer.logprobs
                else:
                    if "text/event-stream" not in ctype and "application/json" not in ctype:
                        raise RequestRejected(
                            f"the endpoint answered {ctype or 'no content type'} instead of an event stream; "
                            "check that the URL is an OpenAI-compatible API (…/v1)",
                            resp.status,
                        )
                    async for line in resp.content:
                        received += len(line)
                        if received > most:
                            raise RequestFailed(
                                f"the stream went past {size_text(most)}, the most evalkit reads for max_tokens "
                                f"{req.gen.max_tokens}: more than any answer of that length"
                            )
                        if not line.startswith(b"data:"):
                            continue  # comments (": ping") and other fields are not progress: the timer runs on
                        seen = time.perf_counter()
                        now = loop.time()
                        if not answer_end:  # the first event: from here the answer's bound and the idle timeout
                            answer_end = now + o.total_timeout(req.gen.max_tokens)
                        timer.reschedule(min(now + o.idle_timeout_s, answer_end))
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            break
                        if not data:
                            continue
                        chunk = orjson.loads(data)
                        if "error" in chunk and not chunk.get("choices"):
                            err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": chunk["error"]}
                            code = int(err.get("code") or 500) if str(err.get("code", "")).isdigit() else 500
                            raise RequestFailed(f"server error mid-stream: {_clip(str(err.get('message')))}", code)
                        if accepted is not None:
                            named = chunk.get("model")
                            if named is not None and (not isinstance(named, str) or named not in accepted):
                                raise RequestFailed(
                                    f"model mismatch: the response came from model {_show(named)}, not the run's "
                                    f"model {self.model!r} (nor an id the endpoint lists); a replica behind the "
                                    "endpoint serves another model (fix it, or pass --allow-model-mismatch)"
                                )
                        choices = chunk.get("choices")
                        if choices:
                            c = choices[0]
                            if chat:
                                delta = c.get("delta") or {}
                                piece = delta.get("content")
                                rpiece = delta.get("reasoning_content") or delta.get("reasoning")
                                called = "tool_calls" in delta and tools.feed(delta["tool_calls"])
                            else:
                                piece = c.get("text")
                                rpiece = None
                                called = False
                            if piece or rpiece or called:
                                self.chunks_received += 1
                                if ttft is None:
                                    ttft = seen - since
                                    self.first_tokens += 1
                                else:
                                    itl.append((seen - last) * 1000.0)
                                last = seen
                                if piece:
                                    text_parts.append(piece)
                                if rpiece:
                                    reasoning_parts.append(rpiece)
                            if c.get("finish_reason") is not None:
                                finish = c["finish_reason"]
                        u = chunk.get("usage")
                        if u:
                            usage = u
                    text, reasoning = _join(text_parts, "text"), _join(reasoning_parts, "reasoning")
                if text is None and reasoning is None:
                    text = ""
        except (RequestFailed, RequestRejected):
            raise
        except (asyncio.TimeoutError, TimeoutError) as e:
            if not timer.expired:  # connecting
                raise RequestFailed(f"timed out ({type(e).__name__}) connecting to the server") from None
            message, resend = timeout_message(o, req, first_bound, answer_end, loop.time())
            raise (RequestFailed(message) if resend else RequestTimedOut(message)) from None
        except aiohttp.ClientError as e:  # dropped connections, broken chunked encoding, unparsable HTTP
            if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):  # retried: others free theirs
                raise RequestFailed(OUT_OF_DESCRIPTORS) from None
            raise RequestFailed(f"connection error: {type(e).__name__}: {e}") from None
        except LineTooLong as e:
            raise RequestFailed(f"malformed event from server: a line longer than {e.args[1]} bytes") from None
        except orjson.JSONDecodeError as e:
            raise RequestFailed(f"malformed event from server: {e}") from None
        except (MalformedAnswer, BodyTooLarge) as e:
            raise RequestFailed(str(e) if isinstance(e, MalformedAnswer) else f"the answer was {e}") from None
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:  # not a chunk's shape
            raise RequestFailed(f"malformed event from server ({type(e).__name__}: {e})") from None
        end = time.perf_counter()
        if finish is None:
            raise RequestFailed("stream ended without a finish_reason (connection cut?)")
        if not isinstance(finish, str):
            raise RequestFailed(f"malformed event from server: finish_reason {_show(finish)} is not a string")
        e2e = end - since
        counts, note = read_usage(usage, req.gen.max_tokens)
        note = "; ".join(n for n in (note, length_note(req, counts)) if n) or None
        calls = tools.calls()
        if self._secrets:  # a server that echoes a credential into the answer (the texts are not otherwise changed)
            text, reasoning = self._scrub(text), self._scrub(reasoning)
            calls = [{k: self._scrub(v) for k, v in c.items()} for c in calls] if calls else calls
        out_tokens = counts["completion_tokens"]
        tpot = None
        if ttft is not None and out_tokens is not None and out_tokens > 1:
            tpot = (e2e - ttft) / (out_tokens - 1) * 1000.0
        return Response(
            text=text,
            reasoning=reasoning,
            finish_reason=finish,
            note=None if note is None else redact_text(note, self._secrets),
            prompt_tokens=counts["prompt_tokens"],
            output_tokens=out_tokens,
            reasoning_tokens=counts["reasoning_tokens"],
            ttft_ms=ttft * 1000.0 if ttft is not None else None,
            tpot_ms=tpot,
            e2e_ms=e2e * 1000.0,
            itl_ms=itl,
            start_s=since - self.t0,
            retry_lost_s=st - since if st > since else None,
            tool_calls=calls,
            logprobs=scored,
        )

    def _scrub(self, value: Any) -> Any:
        """A string with the secrets this client sends replaced by ``***`` (other values as they are)."""
        return redact_secrets(value, self._secrets) if isinstance(value, str) else value

    # -- with retries ------------------------------------------------------------------------------------
    def _backoff(self, exc: RequestFailed, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failed with ``exc``: the server's Retry-After (capped), else
        exponential backoff with jitter."""
        o = self.options
        if exc.retry_after is not None:
            return min(exc.retry_after, o.backoff_max_s * 4)
        cap = min(o.backoff_max_s, o.backoff_base_s * 2 ** (attempt - 1))
        return random.uniform(cap / 2, cap)

    async def generate(self, req: Request) -> Response:
        """Send one request with retries; failures come back as a Response with ``error`` set. With several
        endpoints the Response names the one that answered (or the last one tried).

        A failure that retrying may fix (RequestFailed) is retried after :meth:`_backoff` until ``max_attempts``
        attempts were made or ``max_retry_s`` have passed since the first send; the last failure is the error."""
        body = orjson.dumps(self.payload(req))
        o = self.options
        attempts = 0
        since: float | None = None  # the request's first send: its latencies count from here
        endpoint: int | None = None
        sharded = len(self._targets) > 1
        try:
            while True:
                attempts += 1
                endpoint = self._dispatch(endpoint) if sharded else 0
                sent = time.perf_counter()
                since = sent if since is None else since
                try:
                    resp = await self._once(req, body, endpoint, sent, since)
                except RequestFailed as e:
                    if attempts >= o.max_attempts or time.perf_counter() - since >= o.max_retry_s:
                        raise
                    await asyncio.sleep(self._backoff(e, attempts))
                    continue
                resp.attempts = attempts
                resp.endpoint = self.endpoints[endpoint] if sharded else None
                return resp
        except (RequestFailed, RequestRejected, RequestTimedOut) as e:
            where = self.endpoints[endpoint] if sharded and endpoint is not None else None
            error = redact_text(str(e), self._secrets)
            return Response(text=None, error=error, http_status=e.status, attempts=attempts, endpoint=where)
        finally:
            if sharded and endpoint is not None:
                self.outstanding[endpoint] -= 1
