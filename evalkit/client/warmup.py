"""Warm-up before a run's timed phase: a few requests per sampling config, so that what a server compiles on
first use is compiled before the speed is measured.

vLLM captures its CUDA graphs and compiles the model at start-up, but some kernels are compiled on the first batch
that needs them: the Triton top-k/top-p sampler (``_topk_topp_kernel``) on the first batch with ``top_p < 1``, in
one variant per combination of top-k/top-p and per side of a batch of 64 (its ``SPLIT_COVERS_PONLY``), and the
seeded-sampling path on the first request with a seed. On an H200 that first batch stalled every request in
flight for seconds. So the warm-up sends, for each distinct sampling config of the run (:func:`sampling_key`:
endpoint kind, temperature, top_p, seeded or not), ``count`` requests at the run's concurrency level (capped by
``count``), with ``max_tokens`` at most :data:`MAX_TOKENS`: the batch reaches the size the run's batches have,
and each kernel variant they use is compiled once. The default ``count`` is the run's level (its fixed
concurrency, or where ``--concurrency auto`` starts), capped by the task's request count: a smaller warm-up
would not form a batch of the run's size, a larger one adds nothing.

Prompts come from a shipped text (``warmup.txt``, written for evalkit), sliced at distinct offsets into prompts
of 16 to 256 words, each one different: never the eval's own documents (those would fill the prefix cache with
the timed prompts, and a resumed run sends them again) and never one prompt repeated (that only hits the prefix
cache). Each warm-up request carries the header :data:`WARMUP_HEADER`, so that logs and proxies (and evalkit's
test server) can tell warm-up traffic from the eval's. Answers are dropped: nothing is scored or stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from importlib.resources import files
from typing import Any

import aiohttp

from evalkit.client.http_client import Client, ClientOptions
from evalkit.config.endpoint import credentials
from evalkit.contracts import GenParams, Request

WARMUP_HEADER = "X-Evalkit-Warmup"
MAX_TOKENS = 32  # decode steps enough for a batch to run at full size; the compile happens on the first one
LENGTHS = (16, 48, 96, 160, 256, 32, 128, 64, 200, 24)  # prompt lengths in words, cycled
MAX_ATTEMPTS = 2  # a warm-up request that fails twice is counted as failed; the timed phase retries as usual
SamplingKey = tuple[str, float, float | None, bool]


def _text() -> str:
    return files("evalkit.client").joinpath("warmup.txt").read_text(encoding="utf-8")


def text_sha256() -> str:
    """sha256 of the shipped warm-up text (recorded in the manifest)."""
    return hashlib.sha256(_text().encode("utf-8")).hexdigest()


def prompts(n: int, max_words: int | None = None) -> list[str]:
    """``n`` distinct prompts sliced from the warm-up text: prompt ``i`` starts at word ``i * 7`` (wrapping) and
    is ``LENGTHS[i % len(LENGTHS)]`` words long (at most ``max_words``)."""
    words = _text().split()
    ring = words * 2
    out: list[str] = []
    seen: set[str] = set()
    for i in range(n):
        start = (i * 7) % len(words)
        length = LENGTHS[i % len(LENGTHS)] if max_words is None else max(1, min(LENGTHS[i % len(LENGTHS)], max_words))
        text = " ".join(ring[start : start + length])
        if text in seen:  # past len(words) prompts a start repeats: a suffix keeps every prompt distinct
            text = f"{text} ({i})"
        seen.add(text)
        out.append(text)
    return out


def sampling_key(kind: str, gen: GenParams) -> SamplingKey:
    """What decides which sampler kernels a request needs: endpoint kind, temperature, top_p and whether it has a
    seed (its value, the stop strings and ``max_tokens`` do not)."""
    return (kind, float(gen.temperature), gen.top_p, gen.seed is not None)


@dataclass
class WarmupPoint:
    """One sampling config to warm: its requests' generation settings (those of the first request that has it,
    ``max_tokens`` lowered) and how many warm-up requests it gets, at which concurrency."""

    key: SamplingKey
    gen: GenParams
    requests: int
    concurrency: int

    def record(self, task: str) -> dict[str, Any]:
        """The manifest's entry for it."""
        kind, temperature, top_p, seeded = self.key
        return {
            "task": task,
            "endpoint_kind": kind,
            "temperature": temperature,
            "top_p": top_p,
            "seeded": seeded,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "max_tokens": self.gen.max_tokens,
        }


def plan(
    requests: Iterable[Request], kind: str, count: int, level: int, skip: set[SamplingKey] | None = None
) -> list[WarmupPoint]:
    """The sampling configs of ``requests`` (in order of first use) not in ``skip``, each with ``count`` warm-up
    requests sent ``level`` at a time (at most ``count``), ``max_tokens`` the least of :data:`MAX_TOKENS` and the
    config's requests' own."""
    points: dict[SamplingKey, WarmupPoint] = {}
    for req in requests:
        key = sampling_key(kind, req.gen)
        if skip and key in skip:
            continue
        point = points.get(key)
        if point is None:
            gen = replace(req.gen, max_tokens=min(MAX_TOKENS, req.gen.max_tokens))
            points[key] = WarmupPoint(key, gen, count, max(1, min(level, count)))
        elif req.gen.max_tokens < point.gen.max_tokens:
            point.gen = replace(point.gen, max_tokens=req.gen.max_tokens)
    return [p for p in points.values() if p.requests > 0]


@dataclass
class WarmupResult:
    """What a warm-up did: the points warmed, requests sent and failed, seconds, the first failure's message and
    (``reset_root`` given) whether the prefix cache was reset after it."""

    points: list[WarmupPoint] = field(default_factory=list)
    requests: int = 0
    failed: int = 0
    wall_s: float = 0.0
    first_error: str | None = None
    prefix_cache_reset: bool | None = None
    prefix_cache_note: str | None = None


async def warm_up(client: Client, points: list[WarmupPoint], max_words: int | None = None) -> WarmupResult:
    """Send each point's warm-up requests through ``client`` (one point after another, each ``concurrency`` at a
    time) and drop the answers. The client should send :data:`WARMUP_HEADER` (see the Runner)."""
    result = WarmupResult(points=points)
    t0 = time.perf_counter()
    offset = 0
    for point in points:
        texts = prompts(offset + point.requests, max_words)[offset:]
        offset += point.requests  # every prompt of the warm-up differs, across points too
        slots = asyncio.Semaphore(point.concurrency)

        async def one(i: int, text: str, gen: GenParams = point.gen, slots: asyncio.Semaphore = slots) -> None:
            async with slots:
                resp = await client.generate(Request(task="warmup", doc_id=i, sample_index=0, prompt=text, gen=gen))
            result.requests += 1
            if resp.error is not None:
                result.failed += 1
                result.first_error = result.first_error or resp.error

        await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    result.wall_s = round(time.perf_counter() - t0, 3)
    return result


async def run(
    urls: list[str],
    model: str,
    kind: str,
    requests: Iterable[Request],
    *,
    count: int,
    level: int,
    options: ClientOptions,
    api_key: str | None = None,
    extra_body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    skip: set[SamplingKey] | None = None,
    max_model_len: int | None = None,
    reset_root: str | None = None,
) -> WarmupResult:
    """The warm-up of one task's timed phase: :func:`plan` over its ``requests`` (the configs in ``skip`` were
    warmed already), sent through a :class:`Client` like the run's (its endpoints, body extras and headers, plus
    :data:`WARMUP_HEADER`; at most :data:`MAX_ATTEMPTS` attempts each), prompts short enough for
    ``max_model_len``; then, with ``reset_root`` (a server evalkit started), its prefix cache reset."""
    points = plan(requests, kind, count, level, skip)
    if not points:
        return WarmupResult()
    sent = {**(headers or {}), WARMUP_HEADER: "1"}
    tries = replace(
        options, max_attempts=min(options.max_attempts, MAX_ATTEMPTS), max_retry_s=min(options.max_retry_s, 60.0)
    )
    max_words = None if max_model_len is None else max(1, (max_model_len - MAX_TOKENS - 64) // 2)
    async with Client(
        urls, model, kind=kind, api_key=api_key, options=tries, extra_body=extra_body, headers=sent
    ) as client:
        result = await warm_up(client, points, max_words)
    if reset_root is not None:
        result.prefix_cache_reset, result.prefix_cache_note = await reset_prefix_cache(
            reset_root, credentials(urls[0], api_key)[1]
        )
    return result


async def reset_prefix_cache(root: str, headers: dict[str, str], timeout_s: float = 30.0) -> tuple[bool, str | None]:
    """``POST {root}/reset_prefix_cache`` (vLLM serves it only with ``VLLM_SERVER_DEV_MODE=1``): (whether the
    cache was reset, why not)."""
    url = root.rstrip("/") + "/reset_prefix_cache"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp,
        ):
            if resp.status == 404:
                return False, (
                    "the server has no POST /reset_prefix_cache: vLLM serves it only with VLLM_SERVER_DEV_MODE=1, "
                    "which also opens unauthenticated development endpoints, so evalkit does not set it; pass "
                    "--server-env VLLM_SERVER_DEV_MODE=1 to have the prefix cache reset after the warm-up"
                )
            if resp.status != 200:
                return False, f"POST /reset_prefix_cache answered HTTP {resp.status}"
            body = await resp.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        return False, f"POST /reset_prefix_cache failed: {type(e).__name__}: {e}"
    if isinstance(body, dict) and body.get("success") is False:
        return False, "POST /reset_prefix_cache answered success: false (blocks still held)"
    return True, None
