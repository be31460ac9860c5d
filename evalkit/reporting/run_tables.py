"""Per-task tables of the single-run report: speed, server metrics, GPU memory and task detail."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalkit.config.slos import slos_text
from evalkit.contracts import LATENCIES, QUANTILES, Percentiles, Speed, SteadyState, speed_metric
from evalkit.reporting.formatting import DASH, KV, TEXT_LIMIT, fmt_int, fmt_ms, fmt_num, fmt_pct, fmt_sig, short
from evalkit.scoring.estimators import wilson_interval
from evalkit.store.reader import as_dict, as_int, as_list, as_num, as_str

# ----------------------------------------------------------------------------------------------------------
# Speed, server, GPU


@dataclass
class SpeedCard:
    label: str
    value: str
    sub: str = ""


def speed_cards(
    speed: Speed | None, slos: dict[str, float] | None = None, pricing: dict[str, Any] | None = None
) -> list[SpeedCard]:
    """The headline's speed cards: output tok/s, requests/s, TTFT and TPOT, then goodput and the cost per million
    output tokens where the run has them (made with ``--goodput`` / ``--cost-per-gpu-hour``), under the SLOs
    (``slos``) and the price (``pricing``) the run counted them against."""
    conc = speed.concurrency if speed else None
    wall = speed.wall_s if speed else None
    sub = []
    if conc is not None:
        sub.append(f"concurrency {conc}")
    if wall is not None:
        sub.append(f"{wall:,.1f} s wall")
    return [
        SpeedCard("Output tok/s", fmt_num(speed and speed.output_tokens_per_s), " · ".join(sub)),
        SpeedCard(
            "Requests/s",
            fmt_num(speed and speed.requests_per_s, 2),
            f"total tok/s {fmt_num(speed and speed.total_tokens_per_s)}",
        ),
        *(_latency_card(speed, key) for key in CARD_LATENCIES),
        *_economics_cards(speed, slos, pricing),
    ]


def _economics_cards(
    speed: Speed | None, slos: dict[str, float] | None, pricing: dict[str, Any] | None
) -> list[SpeedCard]:
    cards = []
    if speed is not None and speed.good_requests is not None:
        within = f" within {slos_text(slos)}" if slos else " within the SLOs"
        share = f"{fmt_pct(speed.goodput_share)} of requests{within}"
        cards.append(SpeedCard("Goodput req/s", fmt_num(speed.goodput_requests_per_s, 2), share))
    if speed is not None and speed.cost_per_million_output_tokens is not None:
        cost = f"${fmt_num(speed.cost_per_million_output_tokens, 4)}"
        cards.append(SpeedCard("$ per M output tokens", cost, price_text(pricing) if pricing else ""))
    return cards


def price_text(pricing: dict[str, Any]) -> str:
    """``$2.5/GPU-hour × 2 GPUs``: the price a run's cost figures were counted at."""
    gpus = as_int(pricing.get("gpus"))
    per = f"${as_str(pricing.get('cost_per_gpu_hour'))}/GPU-hour × {as_str(pricing.get('gpus'))} GPU"
    return per + ("" if gpus == 1 else "s")


CARD_LATENCIES = ("ttft_ms", "tpot_ms")  # the latencies with a card: p50, and p99 under it


def _latency_card(speed: Speed | None, key: str) -> SpeedCard:
    p50, p99 = speed_metric(f"{key.removesuffix('_ms')}_p50_ms"), speed_metric(f"{key.removesuffix('_ms')}_p99_ms")
    return SpeedCard(p50.short, fmt_ms(p50.of(speed)), f"p99 {fmt_ms(p99.of(speed))}")


@dataclass
class PctRow:
    label: str
    mean: str
    stats: list[str]  # one per QUANTILES entry
    n: str


def _stats(p: Percentiles) -> list[str]:
    return [fmt_ms(getattr(p, q)) for q, _ in QUANTILES]


def pct_rows(speed: Speed | SteadyState | None) -> list[PctRow]:
    rows = []
    for lat in LATENCIES:
        p: Percentiles | None = getattr(speed, lat.key, None)
        if p is None:
            continue
        rows.append(PctRow(lat.label, fmt_ms(p.mean), _stats(p), fmt_int(p.n)))
    return rows


def speed_table(speed: Speed | None) -> tuple[list[PctRow], list[KV]]:
    rows = pct_rows(speed)
    wall = speed.wall_s if speed else None
    cpu = speed.client_cpu_s if speed else None
    extra = [
        KV("Output tokens/s", fmt_num(speed and speed.output_tokens_per_s)),
        KV("Total tokens/s", fmt_num(speed and speed.total_tokens_per_s)),
        KV("Requests/s", fmt_num(speed and speed.requests_per_s, 3)),
        KV("Wall time", fmt_num(wall) + " s" if wall is not None else DASH),
        KV("Concurrency", as_str(speed and speed.concurrency)),
        KV("Client CPU", fmt_num(cpu) + " s" if cpu is not None else DASH),
        KV("Event-loop lag p99", fmt_ms(speed and speed.loop_lag_ms_p99)),
        KV("Client-bound", _flag_str(speed and speed.client_bound, "yes", "no", DASH)),
    ]
    return rows, extra


def economics_rows(
    speed: Speed | None, slos: dict[str, float] | None, pricing: dict[str, Any] | None, energy: Any = None
) -> list[KV]:
    """The speed table's goodput, cost and energy rows: only for a run given SLOs (--goodput) or a price
    (--cost-per-gpu-hour), with the SLOs and the price they were counted against, or whose GPUs' energy was read
    (with the GPUs counted, from ``energy``: the summary's ``gpu.energy``)."""
    rows: list[KV] = []
    if slos:
        shown = slos_text(slos)
        good = f"{fmt_num(speed and speed.goodput_requests_per_s, 3)} req/s"
        share = f"{fmt_pct(speed and speed.goodput_share)} of requests ({as_str(speed and speed.good_requests)})"
        rows.append(KV(f"Goodput ({shown})", f"{good} · {share}"))
    if pricing:
        per = price_text(pricing)
        steady = speed.steady_state.cost_per_million_output_tokens if speed and speed.steady_state else None
        out_tok = f"${fmt_num(speed and speed.cost_per_million_output_tokens, 4)}"
        rows += [
            KV(
                f"Cost per million output tokens ({per})",
                out_tok + (f" · steady state ${fmt_num(steady, 4)}" if steady is not None else ""),
            ),
            KV("Cost per million total tokens", f"${fmt_num(speed and speed.cost_per_million_total_tokens, 4)}"),
            KV("Cost per 1,000 requests", f"${fmt_num(speed and speed.cost_per_1k_requests, 4)}"),
        ]
    if speed is not None and speed.joules_per_output_token is not None:  # NVML's counters were read
        watts = f" · {fmt_num(speed.avg_power_w_per_gpu)} W per GPU" if speed.avg_power_w_per_gpu is not None else ""
        value = f"{fmt_sig(speed.joules_per_output_token)} J{watts}{energy_gpus_text(energy)}"
        rows.append(KV("Energy per output token (GPUs, NVML)", value))
    return rows


def energy_gpus_text(energy: Any) -> str:
    """`` · GPUs 0, 1 (server)``: the NVML indices the energy counted and where they came from (``devices_from``:
    server, CUDA_VISIBLE_DEVICES or all); empty for a summary without them."""
    if not isinstance(energy, dict):
        return ""
    devices = energy.get("devices")
    if not isinstance(devices, list) or not devices:
        return ""
    source = energy.get("devices_from")
    where = f" ({source})" if isinstance(source, str) and source else ""
    return f" · GPUs {', '.join(str(d) for d in devices)}{where}"


def _flag_str(v: Any, yes: str, no: str, other: str) -> str:
    if v is True:
        return yes
    if v is False:
        return no
    return other


@dataclass
class LatencyRow:
    """One distribution (server histogram or client samples) of one latency metric."""

    metric: str
    source: str  # "server" | "client"
    what: str  # what exactly was measured, shown as a tooltip and in the legend
    mean: str
    stats: list[str]  # one per QUANTILES entry
    n: str
    first: bool = False  # first row of its metric (the metric name is printed once)
    bounded: bool = False  # a stored percentile contradicted the mean and is shown as a bound


# (metric, server key in summary["server"], what the server measures, client key in speed, what the client does)
LATENCY_METRICS = (
    (
        "TTFT",
        "ttft_s",
        "vllm:time_to_first_token_seconds: request arrival at the server to its first token",
        "ttft_ms",
        "request sent to the first streamed chunk with text",
    ),
    (
        "TPOT per request",
        "request_tpot_s",
        "vllm:request_time_per_output_token_seconds: one value per request, decode time / (tokens - 1)",
        "tpot_ms",
        "(E2E - TTFT) / (output tokens - 1), one value per request",
    ),
    (
        "ITL per token gap",
        "tpot_s",
        "vllm:inter_token_latency_seconds: one value per generated token after the first",
        "itl_ms",
        "gap between streamed chunks (a chunk can carry several tokens)",
    ),
    (
        "E2E latency",
        "e2e_s",
        "vllm:e2e_request_latency_seconds: arrival to the last token",
        "e2e_ms",
        "request sent to end of stream",
    ),
    ("Queue time", "queue_s", "vllm:request_queue_time_seconds: waiting before first scheduled", "", ""),
)


def _server_pcts(h: dict[str, Any]) -> tuple[dict[str, str], bool]:
    """Percentiles of a server histogram (seconds) as text. A percentile above ``mean / (1 - q)`` is impossible
    for non-negative times (Markov's inequality): it came from an even spread inside a coarse bucket (evalkit
    before the mean-fitted estimate) and is shown as that bound, "≤ x"."""
    mean = as_num(h.get("mean"))
    out = {"mean": fmt_ms(mean * 1000 if mean is not None else None)}
    bounded = False
    for key, pct in QUANTILES:
        q = pct / 100
        v = as_num(h.get(key))
        if v is not None and mean is not None and v > mean / (1 - q) + 1e-12:
            out[key] = "≤ " + fmt_ms(mean / (1 - q) * 1000)
            bounded = True
        else:
            out[key] = fmt_ms(v * 1000 if v is not None else None)
    return out, bounded


def latency_rows(server: dict[str, Any], speed: Speed | None) -> list[LatencyRow]:
    """Server and client distributions of each latency metric, paired by what they measure."""
    rows: list[LatencyRow] = []
    for metric, skey, swhat, ckey, cwhat in LATENCY_METRICS:
        pair: list[LatencyRow] = []
        h = as_dict(server.get(skey))
        if h:
            p, bounded = _server_pcts(h)
            pair.append(
                LatencyRow(
                    metric,
                    "server",
                    swhat,
                    p["mean"],
                    [p[q] for q, _ in QUANTILES],
                    fmt_int(h.get("n")),
                    bounded=bounded,
                )
            )
        c: Percentiles | None = getattr(speed, ckey, None) if ckey else None
        if c is not None:
            pair.append(LatencyRow(metric, "client", cwhat, fmt_ms(c.mean), _stats(c), fmt_int(c.n)))
        if pair:
            pair[0].first = True
        rows += pair
    return rows


def _requests_str(v: Any) -> str | None:
    if isinstance(v, dict):
        total = fmt_int(v.get("total"))
        reasons = [f"{k} {fmt_int(c)}" for k, c in as_dict(v.get("by_finished_reason")).items() if as_num(c)]
        return f"{total} ({' · '.join(reasons)})" if reasons else total
    return fmt_int(v) if as_num(v) is not None else None


def _prefix_cache_str(server: dict[str, Any]) -> str | None:
    rate = as_num(server.get("prefix_cache_hit_rate"))
    pc = as_dict(server.get("prefix_cache"))
    hits, queries = as_num(pc.get("hits")), as_num(pc.get("queries"))
    if rate is None:
        return None
    if hits is not None and queries is not None:
        return f"{fmt_pct(rate)} ({fmt_int(hits)} of {fmt_int(queries)} prompt tokens)"
    return fmt_pct(rate)


def _engines_str(server: dict[str, Any]) -> str | None:
    engines = as_dict(server.get("engines"))
    if not engines:
        return None
    parts = []
    for name, counts in engines.items():
        c = as_dict(counts)
        parts.append(
            f"engine {name}: {fmt_int(c.get('requests'))} requests, {fmt_int(c.get('prompt_tokens'))} prompt + "
            f"{fmt_int(c.get('generation_tokens'))} generation tokens"
        )
    return " · ".join(parts)


def _peaks_str(server: dict[str, Any]) -> str | None:
    running, waiting = server.get("num_requests_running_peak"), server.get("num_requests_waiting_peak")
    if as_num(running) is None and as_num(waiting) is None:
        return None
    return f"{fmt_int(running)} running · {fmt_int(waiting)} waiting"


SERVER_KNOWN = {
    "available",
    "model_name",
    "interval_s",
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "preemptions",
    "prefix_cache",
    "prefix_cache_hit_rate",
    "kv_cache_usage_peak",
    "num_requests_running_peak",
    "num_requests_waiting_peak",
    "absent",
    "warnings",
    "engines",
    *(m[1] for m in LATENCY_METRICS),
}


def server_counters(server: dict[str, Any]) -> list[KV]:
    """The server's counters and gauge peaks between the scrapes before and after a task, as text."""
    interval = as_num(server.get("interval_s"))
    rows = [
        KV("Requests finished", _requests_str(server.get("requests")), "by vLLM's finished_reason"),
        KV("Prompt tokens", fmt_int(server.get("prompt_tokens")) if server.get("prompt_tokens") is not None else None),
        KV(
            "Generation tokens",
            fmt_int(server.get("generation_tokens")) if server.get("generation_tokens") is not None else None,
        ),
        KV("Prefix-cache hit rate", _prefix_cache_str(server)),
        KV(
            "KV-cache usage peak",
            fmt_pct(server.get("kv_cache_usage_peak"))
            if as_num(server.get("kv_cache_usage_peak")) is not None
            else None,
        ),
        KV("Requests in the engine, peak", _peaks_str(server)),
        KV("Preemptions", fmt_int(server.get("preemptions")) if server.get("preemptions") is not None else None),
        KV("Per engine", _engines_str(server), "data-parallel engines; the rows above are their sums"),
        KV("Measured over", f"{interval:,.1f} s" if interval is not None else None, "between the /metrics scrapes"),
        KV("Served model", as_str(server.get("model_name"))),
    ]
    for w in as_list(server.get("warnings")):
        rows.append(KV("Warning", as_str(w)))
    for k, v in server.items():
        if k not in SERVER_KNOWN and v is not None:
            rows.append(KV(str(k), fmt_sig(v) if as_num(v) is not None else short(v)))
    return [r for r in rows if r.value is not None]


@dataclass
class GpuRow:
    index: str
    name: str
    total_mib: float | None
    peak_mib: float | None
    total: str
    peak: str
    mean: str
    share: str
    samples: str


def gpu_rows(gpu: dict[str, Any], manifest_gpus: Any) -> tuple[list[GpuRow], list[KV]]:
    """Peak and mean memory per GPU from ``summary → gpu → gpus``; names and totals from the manifest (known
    when evalkit started the server). Old stores with a bare ``peak_mib`` list are read too."""
    by_index = {as_int(as_dict(g).get("index")): as_dict(g) for g in as_list(manifest_gpus)}
    mgpus = [as_dict(g) for g in as_list(manifest_gpus)]
    entries = [as_dict(g) for g in as_list(gpu.get("gpus"))]
    if not entries and as_list(gpu.get("peak_mib")):
        entries = [{"index": i, "peak_mib": p} for i, p in enumerate(as_list(gpu.get("peak_mib")))]
    rows = []
    for pos, e in enumerate(entries):
        idx = as_int(e.get("index"))
        m = by_index.get(idx) or (mgpus[pos] if pos < len(mgpus) else {})
        total = as_num(m.get("memory_total_mib")) or as_num(e.get("memory_total_mib"))
        peak = as_num(e.get("peak_mib"))
        rows.append(
            GpuRow(
                index=str(idx) if idx is not None else str(pos),
                name=as_str(m.get("name") or e.get("name")) or DASH,
                total_mib=total,
                peak_mib=peak,
                total=fmt_int(total),
                peak=fmt_int(peak),
                mean=fmt_int(e.get("mean_mib")),
                share=fmt_pct(peak / total) if peak is not None and total else DASH,
                samples=fmt_int(e.get("samples")),
            )
        )
    extra = []
    interval = as_num(gpu.get("interval_s"))
    if interval is not None:
        extra.append(KV("Sampled every", f"{interval:g} s", "nvidia-smi while the task ran"))
    for k, v in gpu.items():
        if k not in ("gpus", "peak_mib", "available", "interval_s") and v is not None:
            extra.append(KV(str(k), short(v)))
    return rows, extra


# ----------------------------------------------------------------------------------------------------------
# Task detail (e.g. AIME per-problem table)


@dataclass
class ProblemRow:
    doc_id: str
    id: str
    n: str
    correct: str
    accuracy: float | None
    accuracy_str: str
    ci: str
    answers: str


@dataclass
class DetailView:
    per_problem: list[ProblemRow]
    scalars: list[KV]
    nested: list[KV]  # pretty JSON, cut


def detail_view(detail: Any) -> DetailView:
    d = as_dict(detail)
    problems = []
    for p in as_list(d.get("per_problem")):
        pd = as_dict(p)
        answers = as_dict(pd.get("answers"))
        top = sorted(answers.items(), key=lambda kv: -(as_num(kv[1]) or 0))[:6]
        ans = ", ".join(f"{short(a, 40)} ×{c}" for a, c in top)
        if len(answers) > len(top):
            ans += f", … ({len(answers) - len(top)} more)"
        acc = as_num(pd.get("accuracy"))
        n, correct = as_int(pd.get("n")), as_num(pd.get("correct"))
        ci = DASH
        if n and correct is not None and 0 <= correct <= n:
            lo, hi = wilson_interval(correct, n)
            ci = f"{fmt_pct(lo, 0)}–{fmt_pct(hi, 0)}"
        problems.append(
            ProblemRow(
                doc_id=as_str(pd.get("doc_id")) or DASH,
                id=as_str(pd.get("id")) or DASH,
                n=fmt_int(pd.get("n")),
                correct=fmt_int(pd.get("correct")),
                accuracy=acc if acc is not None and 0 <= acc <= 1 else None,
                accuracy_str=fmt_pct(acc) if acc is not None and 0 <= acc <= 1 else fmt_sig(acc),
                ci=ci,
                answers=ans,
            )
        )
    scalars, nested = [], []
    for k, v in d.items():
        if k in ("per_problem", "doc_scores", "doc_pairs"):  # per-document scores and pairs, for the gate
            continue
        if isinstance(v, dict | list):
            text = json.dumps(v, indent=1, ensure_ascii=False, default=str)
            nested.append(KV(str(k), text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + "\n…"))
        elif k == "ci" and isinstance(v, str):
            scalars.append(KV("ci (summary.json)", f"{v}; the cards above show these intervals"))
        elif isinstance(v, float) and 0 <= v <= 1 and ("rate" in k or "frac" in k or "share" in k):
            scalars.append(KV(str(k), fmt_pct(v, 2)))
        else:
            scalars.append(KV(str(k), short(v)))
    return DetailView(problems, scalars, nested)
