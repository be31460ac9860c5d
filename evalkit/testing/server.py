"""A deterministic, vLLM-shaped OpenAI-compatible server for tests and client benchmarks.

In-process (background thread, own event loop)::

    with TestServer(Behaviour(ttft_s=0.2, itl_s=0.02, correct_ratio=0.5)) as srv:
        httpx.post(srv.url + "/completions", json={...})
        srv.faults.append({"status": 500})
        srv.requests, srv.completed_count(prompt), srv.max_concurrency_seen, srv.metrics

As a process (for tests that SIGKILL the client, and for benchmarks)::

    python -m evalkit.testing.server --port 0 --ttft 0.2 --itl 0.02 --correct-ratio 0.5
    # prints "evalkit-testserver ready http://127.0.0.1:PORT" once it accepts connections

or from Python: ``with SubprocessServer("--ttft", "0.2") as srv: ...``. ``--answer-tokens N`` (in-process:
``Behaviour(answer_fn=long_answer_fn(N))``) pads every answer to N tokens, for client benchmarks.

Answer policy: the last ``Question: X\\nAnswer:`` of the prompt (or the last user message for chat) is looked
up in the GSM8K test data; the gold solution (ending ``#### N``) is returned when
``sha256(question) mod 1000 < correct_ratio*1000``, else the solution with N changed; then
``\\n\\nQuestion: ...`` filler follows. Chat prompts containing ``\\boxed`` that hold an AIME25 problem get a
text ending ``\\boxed{N}``. With temperature > 0 the hash also takes the seed (or, without a seed, the
number of earlier requests for that prompt) and the choice index, so samples differ. Unknown prompts get
sha256-derived words. See :mod:`evalkit.testing.answers`.

Tokens: a token is ``\\s*\\S+`` (a word with its leading whitespace); chat prompts are counted on
:func:`~evalkit.testing.answers.render_chat`. max_tokens counts reasoning + content; stop strings apply to
content only; ``ignore_eos`` continues with filler words up to max_tokens, ``min_tokens`` up to that many.

Faults (``server.faults`` or ``POST /_test/faults``; one consumed per generation request, FIFO; ``None``
or ``{}`` = behave normally for that request)::

    {"status": 500}                          that status with an OpenAI error JSON body
    {"status": 429, "retry_after": 1}        ... plus a Retry-After header ("message", "type" optional)
    {"html": True}                           200 text/html (nginx-style page); with "status" that status
    {"delay_s": 2.0}                         wait before sending headers (combines with the others)
    {"drop_after_tokens": 3}                 send 3 tokens, then abort the TCP connection (0: no data)
    {"stall_s": 1.5, "after_tokens": 4}      stop sending for 1.5 s after 4 tokens (default 0)
    {"null_content": True}                   content / text is null in every chunk, finishes normally
    {"status": 502, "echo_auth": True}       ... its message quotes the request's Authorization header
    {"model": "other-model"}                 the chunks name this model (a replica serving another one)
    {"hostile": "usage_string"}              a malformed stream, one labelled mode each (streams only):
                                             usage_string / _list / _huge / _huge_float / _float / _negative,
                                             reasoning_tokens_string, finish_reason_int, content_int,
                                             long_data_line, long_comment_line (20 MB lines), ping_only
                                             (only ": ping" comments for "stall_s" seconds, default 3600),
                                             flood (24 MB of text events), deep_arguments / huge_arguments
                                             (tool-call arguments 1,500 deep / 8 MB);
                                             see evalkit.testing.hostile.HOSTILE_MODES

Queueing: ``Behaviour(max_num_seqs=N)`` (``--max-num-seqs N``) runs N requests at once; the others wait their turn
in arrival order (``vllm:num_requests_waiting``). As vLLM, a waiting streamed request has its response headers at
once and its first ``data:`` event once it runs; a non-streamed one gets no byte until its answer is complete.

Warm-up: a generation request with evalkit's warm-up header (``X-Evalkit-Warmup``) is answered as any other but
kept apart: it is in ``srv.warmup_requests``, not ``srv.requests``, takes no fault and does not count towards
``switch_after``. ``Behaviour(first_batch_stall_s=S)`` (``--first-batch-stall S``): the first request of each new
sampling config (temperature, top_p, top_k, min_p) holds every request in flight for S seconds once it starts, as
vLLM compiling a sampler kernel on the first batch that needs it. ``Behaviour(dev_mode=True)`` serves ``POST
/reset_prefix_cache`` (vLLM with ``VLLM_SERVER_DEV_MODE=1``; else 404).

Drift: ``Behaviour(switch_after=N, switch_to={"correct_ratio": 0.4})`` answers the first N generation requests
as configured and every later one with those fields changed (a deployment that starts answering worse).

Credentials and redirects: ``Behaviour(api_key=K)`` wants ``Bearer K`` on ``/v1``, ``basic_auth="user:pw"``
HTTP Basic auth; ``redirect={"status": 307, "to": other.base_url, "paths": ["/metrics"]}`` answers those paths
(all when ``paths`` is absent) with a redirect to the same path at ``to``;
``gzip_bomb={"paths": ["/v1/models"], "bytes": N}`` answers those paths with a small gzip body that decompresses
to N bytes. ``srv.seen`` lists every request received (method, path, headers), test endpoints included.

Besides ``/v1``: vLLM's ``POST /tokenize`` and ``GET /tokenizer_info`` (BOS and EOS ``<|endoftext|>``), for lm-eval's
loglikelihood requests. Test endpoints: ``GET /_test/requests``, ``GET|POST /_test/faults``,
``GET|POST /_test/behaviour`` (JSON object of Behaviour fields), ``POST /_test/reset``, ``GET /_test/stats``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import collections.abc
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from evalkit.testing.answers import count_tokens, default_answer, hash_words, load_data
from evalkit.testing.app import build_app
from evalkit.testing.state import AnswerFn, Behaviour, RecordedRequest, ServerState
from evalkit.testing.vllm_metrics import Metrics

READY_PREFIX = "evalkit-testserver ready "
_READY_RE = re.compile(re.escape(READY_PREFIX) + r"(http://\S+)")


async def _start_site(state: ServerState, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(build_app(state), handler_cancellation=True, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    return runner, server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> collections.abc.AsyncIterator[str]:
    """Serve another aiohttp ``app`` (a test's one odd endpoint) on 127.0.0.1 and yield its base URL
    (``http://127.0.0.1:PORT``); stopped on exit. Tests that need the vLLM-shaped server use :class:`TestServer`."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class TestServer:
    """The server in a background thread, bound to 127.0.0.1 on a free port (or ``port``)."""

    __test__ = False  # not a pytest test class

    def __init__(self, behaviour: Behaviour | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = ServerState(behaviour)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # ---- lifecycle
    def start(self) -> TestServer:
        if self._thread is not None:
            return self
        load_data()  # read the task data now, not during the first request
        ready = threading.Event()
        error: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._runner, self.port = loop.run_until_complete(_start_site(self.state, self.host, self.port))
            except BaseException as e:
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="evalkit-testserver", daemon=True)
        self._thread.start()
        ready.wait(30)
        if error:
            self._thread = None
            raise error[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop)
            with contextlib.suppress(Exception):
                fut.result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._thread = self._loop = self._runner = None

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- addresses
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    # ---- configuration and observation
    @property
    def behaviour(self) -> Behaviour:
        return self.state.behaviour

    @behaviour.setter
    def behaviour(self, value: Behaviour) -> None:
        self.state.behaviour = value

    @property
    def faults(self) -> list[dict[str, Any] | None]:
        """FIFO of faults, one consumed per generation request (``None`` = this one behaves)."""
        return self.state.faults

    @faults.setter
    def faults(self, value: list[dict[str, Any] | None]) -> None:
        self.state.faults[:] = list(value)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of the generation requests received so far (entries update as they complete)."""
        return self.state.requests

    @property
    def warmup_requests(self) -> list[RecordedRequest]:
        """The generation requests sent with evalkit's warm-up header (never in ``requests``)."""
        return self.state.warmup_requests

    @property
    def seen(self) -> list[tuple[str, str, dict[str, str]]]:
        """Every request received so far, any path: (method, path, headers)."""
        return list(self.state.seen)

    def completed_count(self, prompt: str) -> int:
        """How many requests with this prompt (completions prompt or last user message) completed."""
        return self.state.completed_count(prompt)

    @property
    def max_concurrency_seen(self) -> int:
        return self.state.max_concurrency_seen

    @property
    def metrics(self) -> Metrics:
        return self.state.metrics

    def reset(self) -> None:
        """Forget requests, pending faults, metrics and max_concurrency_seen."""
        self.state.reset()


class SubprocessServer:
    """``python -m evalkit.testing.server`` in a child process; ``args`` are its CLI flags."""

    __test__ = False

    def __init__(self, *args: str, port: int = 0, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        self.args = list(args)
        self.port = port
        self.env = env
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""
        self.output: collections.deque[str] = collections.deque(maxlen=200)

    @property
    def url(self) -> str:
        return self.base_url + "/v1"

    def start(self) -> SubprocessServer:
        cmd = [sys.executable, "-m", "evalkit.testing.server", "--port", str(self.port), *self.args]
        env = {**os.environ, **(self.env or {}), "PYTHONUNBUFFERED": "1"}
        # make this evalkit importable in the child even when it is not installed (a source checkout)
        root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, bufsize=1
        )
        found = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line.rstrip("\n"))
                m = _READY_RE.search(line)
                if m and not found.is_set():
                    self.base_url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=pump, name="evalkit-testserver-output", daemon=True).start()
        if not found.wait(self.timeout) or not self.base_url:
            self.stop()
            raise RuntimeError("test server did not start:\n" + "\n".join(self.output))
        self.port = int(self.base_url.rsplit(":", 1)[1])
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> SubprocessServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def long_answer_fn(tokens: int, behaviour: Behaviour | None = None) -> AnswerFn:
    """An ``answer_fn`` giving answers of at least ``tokens`` tokens (for client CPU / memory benchmarks).

    The default policy's answer (so AIME ``\\boxed{N}`` / GSM8K ``#### N`` still score) is preceded by
    sha256-derived filler words that bring the text to ``tokens`` tokens; stop strings and ``max_tokens``
    still apply to the result. ``behaviour`` (if given) supplies ``correct_ratio`` at call time.
    """
    arrivals = itertools.count()

    def answer(prompt: str, body: dict[str, Any], index: int) -> str:
        chat = "messages" in body
        temperature = body.get("temperature")
        seed = body.get("seed")
        variant = ""
        if temperature is None or float(temperature) > 0:
            variant = f"|seed={seed}|i={index}" if seed is not None else f"|r={next(arrivals)}|i={index}"
        ratio = behaviour.correct_ratio if behaviour is not None else 1.0
        text = default_answer(prompt, chat=chat, correct_ratio=ratio, variant=variant)
        missing = tokens - count_tokens(text)
        if missing <= 0:
            return text
        pad = " ".join(hash_words("pad:" + prompt + variant, missing)) + "."
        return ("" if chat else " ") + pad + "\n\n" + text.lstrip(" ")

    return answer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m evalkit.testing.server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = a free port (printed on the ready line)")
    p.add_argument("--ttft", type=float, default=0.0, help="seconds to the first token")
    p.add_argument("--itl", type=float, default=0.0, help="seconds between chunks")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--model", action="append", help="served model name (repeatable); default test-model")
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--correct-ratio", type=float, default=1.0)
    p.add_argument("--reasoning", default=None, help="chat: text streamed first as reasoning")
    p.add_argument("--reasoning-field", default="reasoning_content", choices=["reasoning", "reasoning_content"])
    p.add_argument("--api-key", default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument(
        "--batch-knee",
        type=int,
        default=None,
        help="beyond N running requests every request slows in proportion (throughput flat, no queue)",
    )
    p.add_argument(
        "--knee-power",
        type=float,
        default=1.0,
        help="past --batch-knee, slow down as (running / knee) ** P: P > 1 makes throughput fall (thrashing)",
    )
    p.add_argument("--fast", action="store_true", help="no sleeps, cached responses (client benchmarks)")
    p.add_argument(
        "--first-batch-stall",
        type=float,
        default=0.0,
        help="the first request of each new sampling config holds every request in flight for S seconds",
    )
    p.add_argument(
        "--answer-tokens",
        type=int,
        default=None,
        help="pad every answer with filler words to at least N tokens (long responses for client benchmarks)",
    )
    return p.parse_args(argv)


def behaviour_from_args(args: argparse.Namespace) -> Behaviour:
    b = Behaviour(
        ttft_s=args.ttft,
        itl_s=args.itl,
        tokens_per_chunk=args.tokens_per_chunk,
        models=args.model or ["test-model"],
        max_model_len=args.max_model_len,
        correct_ratio=args.correct_ratio,
        reasoning=args.reasoning,
        reasoning_field=args.reasoning_field,
        api_key=args.api_key,
        max_num_seqs=args.max_num_seqs,
        batch_knee=args.batch_knee,
        knee_power=args.knee_power,
        fast=args.fast,
        first_batch_stall_s=args.first_batch_stall,
    )
    if args.answer_tokens:
        b.answer_fn = long_answer_fn(args.answer_tokens, b)
    return b


async def _serve(args: argparse.Namespace) -> None:
    state = ServerState(behaviour_from_args(args))
    load_data()
    runner, port = await _start_site(state, args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}http://{args.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_serve(parse_args(argv)))


if __name__ == "__main__":
    main()
