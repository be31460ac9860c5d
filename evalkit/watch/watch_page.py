"""``evalkit watch report DIR``: the history of a watch as one self-contained HTML page (the report's template
machinery: inline CSS and Chart.js, a restrictive Content-Security-Policy, no network).

Charts use the report's ``line`` kind with the time since the first tick on x: the window's accuracy in percent
(the cards' unit, on a 0-100% axis) with its 95% interval as a shaded band and the baseline on the same documents
(failed verdicts drawn over it), TTFT/TPOT p50 and tokens/s.
Ticks that could not judge (``cannot_decide``) are shown as such, with their reason, in the cards, the verdict
changes and the history: never as a pass.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import EvalkitError
from evalkit.reporting.formatting import fmt_pct, fmt_sig, now_iso
from evalkit.reporting.html import render_template
from evalkit.store.files import write_text_atomic
from evalkit.watch.tick_log import HISTORY, JUDGED, SETTINGS, TickRecord, read_history, tick_speed_key


def _shown(verdict: str | None) -> str:
    return "cannot decide" if verdict == "cannot_decide" else (verdict or "—")


UNITS = (("minutes", 60.0, 3 * 3600.0), ("hours", 3600.0, 3 * 86400.0), ("days", 86400.0, float("inf")))


def _elapsed(records: list[TickRecord]) -> tuple[list[float], str]:
    """Time since the first tick for each tick, in minutes, hours or days (whichever suits the span)."""
    times = [datetime.fromisoformat(r.finished_at or r.started_at) for r in records]
    secs = [(t - times[0]).total_seconds() for t in times] if times else []
    name, scale, _ = next(u for u in UNITS if (secs[-1] if secs else 0.0) < u[2])
    return [round(x / scale, 4) for x in secs], f"{name} since the first tick"


def _acc(a: Any) -> str:
    if not isinstance(a, dict) or a.get("value") is None:
        return "—"
    return f"{fmt_pct(a['value'])} [{fmt_pct(a['lo'])}, {fmt_pct(a['hi'])}]"


def _series(label: str, xs: list[float], ys: list[Any], band: str | None = None) -> dict[str, Any]:
    """A line; ``band`` "lower" / "upper": an edge of a shaded interval (no line or points of its own, the area
    between the two filled; the lower series comes first)."""
    series: dict[str, Any] = {"label": label, "points": [{"x": x, "y": y} for x, y in zip(xs, ys, strict=True)]}
    if band is not None:
        series["band"] = band
    return series


def _pct(v: Any) -> Any:
    """A share in [0, 1] as percent (the cards' unit); None stays None."""
    return round(100 * v, 4) if isinstance(v, int | float) else None


def _charts(records: list[TickRecord], metric: str) -> list[dict[str, Any]]:
    xs, x_label = _elapsed(records)
    win = [r.window.get("accuracy") or {} for r in records]
    base = [r.window.get("baseline") or {} for r in records]
    failed = [_pct(w.get("value")) if r.verdict == "fail" else None for r, w in zip(records, win, strict=True)]
    accuracy = [  # Chart.js draws the first series on top: the failed verdicts over the accuracy line
        _series("verdict failed", xs, failed),
        _series(f"canary {metric} (window)", xs, [_pct(w.get("value")) for w in win]),
        _series("95% CI lower", xs, [_pct(w.get("lo")) for w in win], band="lower"),
        _series("95% CI", xs, [_pct(w.get("hi")) for w in win], band="upper"),
        _series("baseline, same documents", xs, [_pct(b.get("value")) for b in base]),
    ]
    latency = [
        _series("TTFT p50 (ms)", xs, [r.speed.get(tick_speed_key("ttft_p50_ms")) for r in records]),
        _series("TPOT p50 (ms)", xs, [r.speed.get(tick_speed_key("tpot_p50_ms")) for r in records]),
    ]
    tok = [_series("output tokens/s", xs, [r.speed.get(tick_speed_key("output_tokens_per_s")) for r in records])]
    return [
        {
            "id": "accuracy",
            "kind": "line",
            "title": "Accuracy over the window",
            "x": x_label,
            "y": f"{metric} (%)",
            "percent": True,
            "series": accuracy,
        },
        {"id": "latency", "kind": "line", "title": "Latency per tick", "x": x_label, "y": "ms", "series": latency},
        {
            "id": "throughput",
            "kind": "line",
            "title": "Throughput per tick",
            "x": x_label,
            "y": "tokens/s",
            "series": tok,
        },
    ]


def _changes(records: list[TickRecord]) -> list[dict[str, Any]]:
    out, before = [], None
    for r in records:
        if r.verdict in JUDGED and r.verdict != before:
            out.append(
                {
                    "tick": r.tick,
                    "at": r.finished_at,
                    "before": before and _shown(before),
                    "after": r.verdict,
                    "after_shown": _shown(r.verdict),
                    "p_value": fmt_sig(r.p_value),
                    "rules": r.reason if r.verdict == "cannot_decide" else ", ".join(r.failed_rules),
                }
            )
            before = r.verdict
    return out


def _row(r: TickRecord) -> dict[str, Any]:
    tick_acc = next((v for v in r.accuracy.values() if v is not None), None)
    return {
        "tick": r.tick,
        "at": r.finished_at,
        "status": r.status,
        "error": r.error,
        "requests": r.counts.get("total"),
        "errors": r.counts.get("api_error"),
        "tick_acc": fmt_pct(tick_acc),
        "window_acc": _acc(r.window.get("accuracy")),
        "base_acc": _acc(r.window.get("baseline")),
        "verdict": r.verdict,
        "verdict_shown": _shown(r.verdict),
        "reason": r.reason,
        "p_value": fmt_sig(r.p_value),
        "ttft": r.speed.get(tick_speed_key("ttft_p50_ms")),
        "tpot": r.speed.get(tick_speed_key("tpot_p50_ms")),
        "tok_s": r.speed.get(tick_speed_key("output_tokens_per_s")),
    }


def _cards(records: list[TickRecord]) -> list[dict[str, str]]:
    now = next((r for r in reversed(records) if r.verdict in JUDGED), None)
    last = next((r for r in reversed(records) if r.verdict in ("pass", "fail")), None)
    acc = (last.window.get("accuracy") if last else None) or {}
    base = (last.window.get("baseline") if last else None) or {}
    if now is not None and now.verdict == "cannot_decide":
        sub = f"after tick {now.tick}: {now.reason}"
    else:
        sub = f"after tick {now.tick}, p={fmt_sig(now.p_value)}" if now else "no verdict yet"
    return [
        {"label": "verdict", "value": _shown(now.verdict) if now else "—", "cls": "acc", "sub": sub},
        {
            "label": "window accuracy",
            "value": fmt_pct(acc.get("value")),
            "cls": "acc",
            "sub": f"95% CI {fmt_pct(acc.get('lo'))}–{fmt_pct(acc.get('hi'))}" if acc else "",
        },
        {
            "label": "baseline (same documents)",
            "value": fmt_pct(base.get("value")),
            "cls": "acc",
            "sub": f"95% CI {fmt_pct(base.get('lo'))}–{fmt_pct(base.get('hi'))}" if base else "",
        },
        {
            "label": "ticks failed",
            "value": str(sum(r.status == "failed" for r in records)),
            "cls": "spd",
            "sub": f"of {len(records)}",
        },
    ]


def render_watch_html(watch_dir: Path) -> str:
    if not (watch_dir / HISTORY).is_file():
        raise EvalkitError(f"{watch_dir} holds no {HISTORY}; pass the -o folder of an evalkit watch")
    records = read_history(watch_dir)
    settings = orjson.loads((watch_dir / SETTINGS).read_bytes()) if (watch_dir / SETTINGS).is_file() else {}
    metric = next((str(r.window["metric"]) for r in records if r.window.get("metric")), "accuracy")
    v = {
        "title": f"evalkit watch · {settings.get('task', '')}",
        "generated_at": now_iso(),
        "charts": _charts(records, metric),
        "label": watch_dir.resolve().name,
        "task": settings.get("task", "?"),
        "per_tick": settings.get("per_tick"),
        "window": settings.get("window"),
        "baseline": settings.get("baseline") or f"the first {settings.get('baseline_ticks')} ticks",
        "metric": metric,
        "ticks": len(records),
        "failed": sum(r.status == "failed" for r in records),
        "undecided": sum(r.verdict == "cannot_decide" for r in records),
        "first": records[0].started_at if records else None,
        "last": records[-1].finished_at if records else None,
        "cards": _cards(records),
        "changes": _changes(records),
        "rows": [_row(r) for r in reversed(records)],
    }
    return render_template("watch.html.j2", v=v)


def render_watch(watch_dir: Path, output: Path | None = None) -> Path:
    """Write the watch report (default ``WATCH_DIR/watch.html``; a folder ``output`` gets ``watch.html``)."""
    html = render_watch_html(Path(watch_dir))
    target = Path(watch_dir) / "watch.html" if output is None else output
    if target.is_dir():
        target = target / "watch.html"
    write_text_atomic(target, html)
    return target
