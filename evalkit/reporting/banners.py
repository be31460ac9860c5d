"""Banners at the top of a run report: what went wrong in a run and what it means for its numbers.

Every request status other than ``ok`` that reaches :data:`STATUS_SHARE` of a task's requests (any
``api_error``) gets a banner saying what happened and how the score treats it; so do a client-bound run, a
stall of the server (no first token for seconds while requests waited), requests re-sent after a failed attempt
and clamped ``max_tokens``.
"""

from __future__ import annotations

from typing import Any

from evalkit.contracts import ResentSummary, Speed
from evalkit.reporting.analysis import primary_correct
from evalkit.reporting.formatting import Banner, clamp_text, fmt_ms, fmt_pct
from evalkit.reporting.load_view import load_banner
from evalkit.reporting.timecourse import first_token_stall
from evalkit.scoring.speed import percentile
from evalkit.scoring.summary import LOOP_LAG_BOUND_MS
from evalkit.store.reader import Run, as_dict, as_int, as_num

STATUS_SHARE = 0.01  # a status on at least this share of a task's requests gets a banner (api_error: any)


def _share(k: int, total: int | None) -> str:
    return f"{k:,} of {total:,} ({fmt_pct(k / total)})" if total else f"{k:,}"


def _accuracy_without(samples: list[dict[str, Any]], status: str) -> str:
    """The primary metric on the scored samples whose status is not ``status``, as text ('' without samples)."""
    flags = [f for s in samples if s.get("status") not in (status, "api_error") for f in [primary_correct(s)[1]]]
    scored = [f for f in flags if f is not None]
    if not scored:
        return ""
    return f"{fmt_pct(sum(scored) / len(scored))} of the other {len(scored):,}"


# server or parser faults: shown at any share
ALWAYS_SHOWN = ("tool_text", "tool_calls_empty", "bad_arguments", "bad_positions")


def status_banner(
    name: str, status: str, k: int, total: int | None, settings: dict[str, Any], samples: list[dict[str, Any]]
) -> Banner:
    share = _share(k, total)
    rest = _accuracy_without(samples, status)
    if status == "api_error":
        answered = f" {total - k:,}" if total else ""
        text = (
            f"{name}: {share} requests failed after retries (api_error). They are not scored and not in any "
            f"metric's n: the scores describe only the{answered} answered requests. Re-run the same command to "
            "retry them."
        )
    elif status == "empty":
        cap = f" (at most {fmt_pct(1 - k / total)})" if total else ""
        text = (
            f"{name}: {share} answers were empty: no text came back (e.g. the model ended its answer at once). "
            f"They are scored as wrong and counted in n, so the score cannot exceed the share of non-empty answers{cap}"
            + (f"; the primary metric is {rest} answers" if rest else "")
            + ". Check server.log, the stop sequences and the prompt length."
        )
    elif status == "no_answer":
        text = (
            f"{name}: {share} answers had no extractable answer (e.g. no \\boxed{{}} in the final text). They "
            "are scored as wrong and counted in n: the score measures the answer format as much as the math"
            + (f"; the primary metric is {rest} answers" if rest else "")
            + "."
        )
    elif status == "truncated":
        max_tokens = as_int(settings.get("max_tokens"))
        at = f" ({max_tokens:,} tokens)" if max_tokens else ""
        text = (
            f"{name}: {share} responses stopped at max_tokens{at} (finish_reason length). They are scored as "
            "they are and mostly wrong, because the answer comes last"
            + (f"; the primary metric is {rest} responses" if rest else "")
            + ". Raise --max-tokens if the model needs the room."
        )
    elif status == "tool_text":
        text = (
            f"{name}: {share} answers wrote a tool call as text that the server did not parse (tool_text): the "
            "server's tool-call parser is likely off or wrong for this model. Start vLLM with "
            "--enable-auto-tool-choice and a --tool-call-parser that fits the model's chat template. They are "
            "scored as BFCL scores them (no call)" + (f"; the primary metric is {rest} answers" if rest else "") + "."
        )
    elif status == "tool_calls_empty":
        text = (
            f"{name}: {share} answers ended with finish_reason tool_calls but an empty or missing list of calls "
            "(tool_calls_empty): a server or parser fault (reported with DeepSeek's tool parser), not the model's "
            "choice. They are scored as no call" + (f"; the primary metric is {rest} answers" if rest else "") + "."
        )
    elif status == "bad_arguments":
        text = (
            f"{name}: {share} tool calls had arguments that are not a JSON object (bad_arguments). They are scored "
            "as BFCL scores them (undecodable: wrong where a call was expected)"
            + (f"; the primary metric is {rest} answers" if rest else "")
            + "."
        )
    elif status == "bad_positions":
        text = (
            f"{name}: {share} answers had prompt logprobs that do not fit their prompt tokens (bad_positions: "
            "missing, empty or of another length): they have no positions and are in no metric. Check that the "
            "server returns prompt_logprobs (vLLM: --max-logprobs at least the task's top_k)."
        )
    else:
        text = f"{name}: {share} requests have status {status}."
    return Banner("warn", text)


def _inside_engine(server: dict[str, Any], seconds: float) -> str:
    """What the server says about a wait of ``seconds`` before the first tokens: where it went, and the prefill
    rate it would mean if it was all prefill of the task's uncached prompt tokens."""
    srv_ttft = as_num(as_dict(server.get("ttft_s")).get("mean"))
    srv_queue = as_num(as_dict(server.get("queue_s")).get("mean"))
    out = ""
    if srv_ttft is not None and srv_queue is not None:
        out = (
            f" The server's own clock agrees (TTFT {fmt_ms(srv_ttft * 1000)} mean, {fmt_ms(srv_queue * 1000)} of it "
            "in its queue): the time went inside the engine, not into queueing or the client."
        )
    prompt = as_num(server.get("prompt_tokens"))
    hits = as_num(as_dict(server.get("prefix_cache")).get("hits")) or 0.0
    if prompt and seconds > 0:
        out += (
            f" Prefilling all {prompt - hits:,.0f} uncached prompt tokens of the task in that time would be "
            f"{(prompt - hits) / seconds:,.0f} tokens/s: if this server prefills far faster, it was warming up (e.g. "
            "compiling kernels on first use) and TTFT should be measured against a warmed-up server."
        )
    return out


def stall_banner(name: str, samples: list[dict[str, Any]], server: dict[str, Any]) -> Banner | None:
    """A banner when the client saw the server stall (see :func:`first_token_stall`)."""
    stall = first_token_stall(samples)
    if stall is None:
        return None
    affected = set(stall.affected)
    others = [
        v for i, s in enumerate(samples) if i not in affected for v in [as_num(s.get("ttft_ms"))] if v is not None
    ]
    p50 = fmt_ms(percentile(sorted(others), 50)) if others else ""
    rest = f" TTFT of the {len(others):,} requests that did not wait through it: p50 {p50}." if others else ""
    return Banner(
        "warn",
        f"{name}: no request got its first token for {stall.seconds:.1f} s ({stall.start_s:.1f}–{stall.end_s:.1f} s "
        f"into the run) while {stall.waiting:,} waited; then {stall.burst:,} first tokens came within "
        f"{stall.burst_ms:.0f} ms. The TTFT of {len(affected):,} requests includes this wait."
        f"{_inside_engine(server, stall.end_s)}{rest}",
    )


def shared_wait_banner(name: str, speed: Speed | None, server: dict[str, Any]) -> Banner | None:
    """Without per-sample start times: TTFTs of seconds that are all the same (p50 to p99 within 2%) mean one
    wait shared by the requests, not a per-request cost."""
    p50, p99 = (speed.ttft_ms.p50, speed.ttft_ms.p99) if speed else (None, None)
    if p50 is None or p99 is None or p50 < 1000 or p99 - p50 > 0.02 * p50:
        return None
    return Banner(
        "warn",
        f"{name}: TTFT p50 {fmt_ms(p50)} and p99 {fmt_ms(p99)}: the requests waited about the same "
        f"{p50 / 1000:.1f} s for their first token, whatever their prompt: one wait they shared, not the cost of "
        f"each request.{_inside_engine(server, p99 / 1000)}",
    )


def resent_banner(name: str, resent: ResentSummary, total: int | None) -> Banner:
    k = resent.requests
    share = f" ({fmt_pct(k / total)} of {total:,})" if total else ""
    return Banner(
        "warn",
        f"{name}: {k:,} {'request was' if k == 1 else 'requests were'} re-sent{share} after a failed attempt (a "
        f"dropped connection, HTTP 408/409/429/5xx, a stream that stalled once its tokens flowed); the failed "
        f"attempts and their backoff took {resent.lost_s:.1f} s in all. Latencies count from each request's first "
        "send, as its user waited: the TTFT and E2E of the re-sent requests include that time.",
    )


def client_bound_banner(name: str, speed: Speed) -> Banner:
    """Why the run was judged client-bound, in a sentence: the event-loop lag and the client's CPU that decided it."""
    lag, cpu, wall = speed.loop_lag_ms_p99, speed.client_cpu_s, speed.wall_s
    evidence = []
    if lag is not None and lag > LOOP_LAG_BOUND_MS:
        evidence.append(
            f"its event loop fell behind again and again (p99 {lag:.0f} ms late on its 50 ms checks; more than "
            f"{LOOP_LAG_BOUND_MS:.0f} ms is late), so requests were sent and their streams read later than the server "
            "was ready"
        )
    if cpu is not None and wall:
        evidence.append(f"it kept a CPU core {cpu / wall:.0%} busy ({cpu:.1f} s of CPU in {wall:.1f} s)")
    why = f": {', while '.join(evidence) if len(evidence) == 2 else evidence[0]}" if evidence else ""
    return Banner(
        "warn",
        f"{name}: the client was the bottleneck{why}. Speed numbers are lower bounds for the server; rerun with "
        "lower concurrency or a faster client machine.",
    )


def _note(note: str) -> str:
    if note == "samples.jsonl is missing":
        return (
            "samples.jsonl is missing: no per-sample list, latency distributions, accuracy by length or throughput "
            "over time; everything else comes from summary.json."
        )
    return note


def run_banners(run: Run) -> list[Banner]:
    out = [Banner("warn", _note(note)) for note in run.notes]
    manifest = run.manifest_read()
    for t in run.tasks():
        name, speed, counts, server = t.name, t.speed, t.counts, t.server or {}
        if speed is not None and speed.client_bound is True:
            out.append(client_bound_banner(name, speed))
        total = counts.get("total")
        samples = [s for s in run.samples if s.get("task") == name]
        settings = manifest.task(name).settings
        for status in ("api_error", "empty", "no_answer", "truncated", *ALWAYS_SHOWN):
            k = counts.get(status) or 0
            if k > 0 and (status in ("api_error", *ALWAYS_SHOWN) or not total or k / total >= STATUS_SHARE):
                out.append(status_banner(name, status, k, total, settings, samples))
        if t.load is not None and (late := load_banner(name, t.load)) is not None:
            out.append(late)
        if t.resent is not None and t.resent.requests > 0:
            out.append(resent_banner(name, t.resent, total))
        timed = [s for s in samples if as_num(s.get("start_s")) is not None]
        if timed:
            stall = stall_banner(name, timed, server)
        else:
            stall = shared_wait_banner(name, speed, server)
        if stall is not None:
            out.append(stall)
    for name, mt in manifest.tasks.items():
        clamp = mt.max_tokens_clamp
        if clamp:
            out.append(Banner("info", f"{name}: {clamp_text(clamp)}"))
    return out
