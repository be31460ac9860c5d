"""docker/monitoring: the alert rules and the Grafana dashboard parse (PromQL by promql-parser) and ask only for
metrics that evalkit watch exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from evalkit.watch import WatchMetrics
from evalkit.watch.window import Accuracy

MONITORING = Path(__file__).resolve().parents[2] / "docker" / "monitoring"
NAME = re.compile(r"\bevalkit_[a-z0-9_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported() -> set[str]:
    """Every sample name the watch's exposition carries once each metric has a value."""
    m = WatchMetrics()
    acc = Accuracy(0.8, 0.7, 0.9, 100)
    m.window("gsm8k", "exact_match,strict-match", acc, acc, {"total": 10, "api_error": 1, "empty": 0, "truncated": 0})
    m.requests_seen("gsm8k", [{"status": "ok", "ttft_ms": 20.0, "tpot_ms": 5.0, "e2e_ms": 300.0}], 120.0)
    m.tick_done("gsm8k", True, 1.0)
    m.verdict_made("gsm8k", False, 0.001, {"gsm8k: exact_match,strict-match": True})
    gpu = {"gpus": [{"index": 0, "peak_mib": 1000.0}]}
    server = {
        "kv_cache_usage_peak": 0.2,
        "num_requests_running_peak": 3,
        "num_requests_waiting_peak": 0,
        "preemptions": 0,
    }
    m.server_figures("gsm8k", server, gpu, {"0": 80000.0})
    text = generate_latest(m.registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def names_in(expr: str) -> set[str]:
    return set(NAME.findall(expr))


def check_expr(expr: str, names: set[str]) -> None:
    promql_parser.parse(expr)  # raises ValueError on a syntax error
    used = names_in(expr)
    assert used, f"no evalkit metric in {expr!r}"
    unknown = {n for n in used if n not in names and not any(n + s in names for s in SUFFIXES)}
    assert not unknown, f"{expr!r} names metrics evalkit watch does not export: {sorted(unknown)}"


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_every_alert_rule_parses_and_uses_exported_metrics() -> None:
    names = exported()
    alerts = {r["alert"] for r in rules()}
    assert {
        "EvalkitVerdictFailed",
        "EvalkitAccuracyBelowBaselineCI",
        "EvalkitCanaryErrors",
        "EvalkitCanaryTTFTp99High",
        "EvalkitGPUMemoryCreeping",
    } <= alerts
    for r in rules():
        check_expr(str(r["expr"]), names)
        assert r["labels"]["severity"] in ("critical", "warning")


def test_a_misspelt_metric_or_bad_promql_is_caught() -> None:
    names = exported()
    with pytest.raises(AssertionError, match="does not export"):
        check_expr("evalkit_canary_acuracy < 0.5", names)
    with pytest.raises(ValueError):
        check_expr("sum by (task (evalkit_watch_verdict)", names)


def test_the_dashboard_is_json_whose_queries_parse_and_use_exported_metrics() -> None:
    dash = json.loads((MONITORING / "grafana" / "dashboards" / "evalkit-watch.json").read_text())
    names = exported()
    exprs = [t["expr"].replace("$task", "gsm8k") for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 12
    for expr in exprs:
        check_expr(expr, names)
    titles = " | ".join(p["title"] for p in dash["panels"])
    for what in ("accuracy", "TTFT", "TPOT", "tokens/s", "Verdict history", "GPU memory"):
        assert what in titles
