"""The watch's Prometheus ``/metrics`` (prometheus_client): canary accuracy, latency, rates, ticks, verdicts,
and the server and GPU figures each tick's run recorded.

Metric names (every one carries a ``task`` label; accuracy also ``metric``):

- ``evalkit_canary_accuracy``, ``…_ci_lower``, ``…_ci_upper``: over the window (95% interval);
  ``evalkit_baseline_accuracy``, ``…_ci_lower``, ``…_ci_upper``: the baseline on the same documents
- ``evalkit_canary_ttft_seconds``, ``evalkit_canary_tpot_seconds``, ``evalkit_canary_e2e_seconds``: histograms
  of every canary request; ``evalkit_canary_output_tokens_per_second``: the last tick's
- ``evalkit_canary_requests_total{status}``; ``evalkit_canary_error_rate``, ``…_empty_rate``,
  ``…_truncated_rate``: over the window
- ``evalkit_watch_ticks_total``, ``evalkit_watch_ticks_failed_total``, ``evalkit_watch_last_tick_timestamp_seconds``
- ``evalkit_watch_can_judge``: 1 when the last tick reached a verdict, 0 when it could not (baseline still
  forming, tick failed, no usable baseline, the gate could not compare: the history says why)
- ``evalkit_watch_verdict`` (1 pass, 0 fail), ``evalkit_watch_verdict_p_value`` (the first accuracy rule's),
  ``evalkit_watch_rule_failed{rule}``: the last verdict's, present only while ``can_judge`` is 1 (never a
  stale pass while the watch cannot judge)
- ``evalkit_server_kv_cache_usage_ratio``, ``evalkit_server_requests_running``, ``evalkit_server_requests_waiting``
  (peaks during the last tick), ``evalkit_server_preemptions_total``
- ``evalkit_gpu_memory_used_bytes{gpu}`` (peak during the last tick), ``evalkit_gpu_memory_total_bytes{gpu}``
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from evalkit.errors import ConfigError

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
MIB = 1024 * 1024


def check_port(port: int) -> None:
    """ConfigError unless ``port`` is a TCP port number (0: a free one)."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--metrics-port {port} is not a port; pass 0..65535 (0: a free one)")


class WatchMetrics:
    """The watch's metrics in a registry of their own (served by :meth:`serve`)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        t, tm = ["task"], ["task", "metric"]
        self.accuracy = {
            key: Gauge(f"evalkit_{who}_accuracy{suffix}", f"{text}", tm, registry=r)
            for key, who, suffix, text in (
                ("value", "canary", "", "Canary accuracy over the window of ticks"),
                ("lo", "canary", "_ci_lower", "Lower end of the canary accuracy's 95% interval"),
                ("hi", "canary", "_ci_upper", "Upper end of the canary accuracy's 95% interval"),
                ("base", "baseline", "", "Baseline accuracy on the window's documents"),
                ("base_lo", "baseline", "_ci_lower", "Lower end of the baseline accuracy's 95% interval"),
                ("base_hi", "baseline", "_ci_upper", "Upper end of the baseline accuracy's 95% interval"),
            )
        }
        self.ttft = Histogram(
            "evalkit_canary_ttft_seconds", "Canary time to first token", t, buckets=LATENCY_BUCKETS, registry=r
        )
        self.tpot = Histogram(
            "evalkit_canary_tpot_seconds", "Canary time per output token", t, buckets=TPOT_BUCKETS, registry=r
        )
        self.e2e = Histogram(
            "evalkit_canary_e2e_seconds", "Canary end-to-end latency", t, buckets=LATENCY_BUCKETS, registry=r
        )
        self.tok_s = Gauge("evalkit_canary_output_tokens_per_second", "Output tokens/s of the last tick", t, registry=r)
        self.requests = Counter("evalkit_canary_requests", "Canary requests by status", ["task", "status"], registry=r)
        self.rates = {
            s: Gauge(
                f"evalkit_canary_{name}_rate", f"Share of the window's canary requests that ended {s}", t, registry=r
            )
            for s, name in (("api_error", "error"), ("empty", "empty"), ("truncated", "truncated"))
        }
        self.ticks = Counter("evalkit_watch_ticks", "Ticks run", t, registry=r)
        self.ticks_failed = Counter(
            "evalkit_watch_ticks_failed", "Ticks that failed (endpoint down, ...)", t, registry=r
        )
        self.last_tick = Gauge("evalkit_watch_last_tick_timestamp_seconds", "When the last tick ended", t, registry=r)
        self.can_judge = Gauge(
            "evalkit_watch_can_judge", "1 when the last tick reached a verdict, 0 when it could not", t, registry=r
        )
        self.verdict = Gauge(
            "evalkit_watch_verdict", "Last drift verdict: 1 pass, 0 fail (absent when it cannot judge)", t, registry=r
        )
        self.p_value = Gauge(
            "evalkit_watch_verdict_p_value", "p-value of the last verdict's accuracy rule", t, registry=r
        )
        self.rule_failed = Gauge(
            "evalkit_watch_rule_failed", "1 when the rule failed in the last verdict", ["task", "rule"], registry=r
        )
        self.kv = Gauge(
            "evalkit_server_kv_cache_usage_ratio", "Peak KV-cache usage during the last tick", t, registry=r
        )
        self.running = Gauge(
            "evalkit_server_requests_running", "Peak running requests during the last tick", t, registry=r
        )
        self.waiting = Gauge(
            "evalkit_server_requests_waiting", "Peak waiting requests during the last tick", t, registry=r
        )
        self.preemptions = Counter("evalkit_server_preemptions", "Server preemptions during ticks", t, registry=r)
        self.gpu_used = Gauge(
            "evalkit_gpu_memory_used_bytes", "Peak GPU memory used during the last tick", ["gpu"], registry=r
        )
        self.gpu_total = Gauge("evalkit_gpu_memory_total_bytes", "GPU memory", ["gpu"], registry=r)
        self._server: Any = None

    def serve(self, port: int, addr: str) -> int:
        """Serve ``/metrics`` on ``addr:port`` (0: a free port) in a thread; returns the port. ConfigError
        (one line: the port, the address, the fix) when it cannot listen there."""
        check_port(port)
        try:
            self._server, _ = start_http_server(port, addr=addr, registry=self.registry)
        except socket.gaierror as e:
            raise ConfigError(
                f"--metrics-addr {addr!r} is not an address of this host ({e.strerror}); pass an IP address such "
                "as 127.0.0.1, or 0.0.0.0 for every interface"
            ) from None
        except (OSError, OverflowError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            if isinstance(e, OSError) and e.errno == errno.EADDRINUSE:
                fix = "pass another --metrics-port (0: a free one) or stop what listens there"
            else:
                fix = "pass --metrics-addr an address of this host (127.0.0.1, 0.0.0.0) and a free --metrics-port"
            raise ConfigError(f"cannot serve /metrics on {addr}:{port} ({why}); {fix}") from None
        return int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- updates -------------------------------------------------------------------------------------------
    def start(self, task: str) -> None:
        """The tick counters at 0 from the start, so that the first failure is an increase Prometheus sees."""
        self.ticks.labels(task)
        self.ticks_failed.labels(task)
        self.requests.labels(task, "api_error")
        self.can_judge.labels(task).set(0)

    def tick_done(self, task: str, failed: bool, at: float) -> None:
        self.ticks.labels(task).inc()
        if failed:
            self.ticks_failed.labels(task).inc()
        self.last_tick.labels(task).set(at)

    def requests_seen(self, task: str, samples: Iterable[dict[str, Any]], tok_s: float | None) -> None:
        """Each of a tick's requests into the status counter and latency histograms."""
        for s in samples:
            self.requests.labels(task, str(s.get("status"))).inc()
            for hist, key in ((self.ttft, "ttft_ms"), (self.tpot, "tpot_ms"), (self.e2e, "e2e_ms")):
                v = s.get(key)
                if isinstance(v, int | float) and not isinstance(v, bool):
                    hist.labels(task).observe(v / 1000.0)
        if tok_s is not None:
            self.tok_s.labels(task).set(tok_s)

    def window(self, task: str, metric: str, canary: Any, baseline: Any, counts: dict[str, int]) -> None:
        """The window's accuracy (and the baseline's on its documents) with their intervals, and its rates."""
        for prefix, acc in (("", canary), ("base", baseline)):
            if acc is None:
                continue
            for part, value in (("value", acc.value), ("lo", acc.lo), ("hi", acc.hi)):
                key = part if not prefix else ("base" if part == "value" else f"base_{part}")
                self.accuracy[key].labels(task, metric).set(value)
        total = counts.get("total") or 0
        for status, gauge in self.rates.items():
            if total:
                gauge.labels(task).set(counts.get(status, 0) / total)

    def verdict_made(self, task: str, passed: bool, p_value: float | None, rules: dict[str, bool]) -> None:
        """A verdict was reached: can_judge 1, the verdict, its p-value and rules (those of an earlier verdict
        dropped)."""
        self.verdict.labels(task).set(1 if passed else 0)
        self.can_judge.labels(task).set(1)
        if p_value is not None:
            self.p_value.labels(task).set(p_value)
        else:
            self.p_value.remove(task)
        for name, failed in rules.items():
            self.rule_failed.labels(task, name).set(1 if failed else 0)
        for labels in {s.labels["rule"] for m in self.rule_failed.collect() for s in m.samples} - set(rules):
            self.rule_failed.remove(task, labels)

    def cannot_judge(self, task: str) -> None:
        """No verdict now: can_judge 0, and the last verdict's series removed (not left showing a pass)."""
        self.can_judge.labels(task).set(0)
        self._clear_verdict(task)

    def _clear_verdict(self, task: str) -> None:
        self.verdict.remove(task)
        self.p_value.remove(task)
        self.rule_failed.clear()  # the registry is this watch's, of one task

    def server_figures(self, task: str, server: dict[str, Any], gpu: dict[str, Any], totals: dict[str, float]) -> None:
        """The figures the tick's run recorded from the server's /metrics and nvidia-smi (absent ones are left
        unset, never exported as 0)."""
        for gauge, key in (
            (self.kv, "kv_cache_usage_peak"),
            (self.running, "num_requests_running_peak"),
            (self.waiting, "num_requests_waiting_peak"),
        ):
            v = server.get(key)
            if isinstance(v, int | float):
                gauge.labels(task).set(v)
        pre = server.get("preemptions")
        if isinstance(pre, int | float) and pre >= 0:
            self.preemptions.labels(task).inc(pre)
        for g in gpu.get("gpus") or []:
            if isinstance(g.get("peak_mib"), int | float):
                self.gpu_used.labels(str(g.get("index"))).set(g["peak_mib"] * MIB)
        for index, mib in totals.items():
            self.gpu_total.labels(index).set(mib * MIB)
