"""evalkit watch against the test server: canary marking, rotation, drift caught within the ticks McNemar's
power predicts, no alarm on noise, /metrics, an endpoint outage, a restart, the webhook's retries, the CLI and
the history report."""

from __future__ import annotations

import collections
import json
import shutil
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.testing.answers import default_answer
from evalkit.testing.server import Behaviour, TestServer
from evalkit.watch import CANARY_HEADER, CANARY_USER, Watch, WatchSettings, read_history, ticks_to_detect

pytestmark = pytest.mark.slow

# accuracy only: the test server's timings are the machine's noise, not the server's speed
POLICY = (
    "accuracy: {default: {alpha: 0.01}}\nspeed: {output_tokens_per_s: null, ttft_p50_ms: null, tpot_p50_ms: null}\n"
)
RUN = {"max_tokens": 48}


def noisy(behaviour: Behaviour) -> Any:
    """Answers as if sampled: each request for a prompt is a fresh draw (right with ``correct_ratio``), seeded by
    how many times that prompt was asked before, so the outcome does not depend on request order."""
    asked: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def answer(prompt: str, body: dict[str, Any], index: int) -> str:
        with lock:
            n = asked[prompt]
            asked[prompt] += 1
        return default_answer(prompt, chat=False, correct_ratio=behaviour.correct_ratio, variant=f"|draw={n}")

    return answer


def settings(url: str, out: Path, **kw: Any) -> WatchSettings:
    base = dict(
        task="gsm8k",
        endpoint=url,
        out=out,
        every_s=0.05,
        per_tick=20,
        window=4,
        concurrency=4,
        request_rate=None,
        run=dict(RUN),
    )
    return WatchSettings(**{**base, **kw})


def baseline_run(url: str, out: Path, limit: int) -> Path:
    Runner(
        load_config(
            {
                "tasks": ["gsm8k"],
                "endpoint": url,
                "limit": limit,
                "output_dir": out,
                "report": False,
                "concurrency": 4,
                **RUN,
            }
        )
    ).run()
    return out


def policy_file(tmp_path: Path) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(POLICY)
    return p


def test_each_tick_is_a_marked_canary_run_of_its_slice(tmp_path: Path) -> None:
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        history = Watch(settings(srv.url, tmp_path / "w", ticks=2, per_tick=5, baseline_ticks=2)).run()
        reqs = srv.requests
    assert [r.tick for r in history] == [1, 2] and all(r.verdict == "baseline" for r in history)
    assert len(reqs) == 10
    assert all(r.body.get("user") == CANARY_USER for r in reqs)
    assert all(r.headers.get(CANARY_HEADER) == "1" for r in reqs)
    manifest = json.loads((tmp_path / "w" / "ticks" / "000001" / "manifest.json").read_text())
    assert manifest["tasks"]["gsm8k"]["settings"]["docs"] == history[0].docs
    assert manifest["tasks"]["gsm8k"]["requests"] == 5


@pytest.mark.parametrize("drift", [True, False])
def test_drift_fails_within_the_predicted_ticks_and_noise_never_does(tmp_path: Path, drift: bool) -> None:
    b = Behaviour(correct_ratio=0.8)
    b.answer_fn = noisy(b)
    healthy, per_tick, window, base_n = 3, 20, 4, 80
    bound = ticks_to_detect(0.4, 0.8, per_tick, window, alpha=0.01, power=0.99)
    assert bound == 4
    with TestServer(b) as srv:
        base = baseline_run(srv.url, tmp_path / "base", base_n)
        if drift:  # from the 4th tick on, the endpoint answers 40% right instead of 80%
            b.update(switch_after=base_n + healthy * per_tick, switch_to={"correct_ratio": 0.4})
        n_ticks = healthy + bound if drift else 16
        s = settings(srv.url, tmp_path / "w", baseline=base, ticks=n_ticks, policy=policy_file(tmp_path))
        history = Watch(s).run()
    verdicts = [r.verdict for r in history]
    assert all(r.status == "ok" for r in history)
    assert verdicts[:healthy] == ["pass"] * healthy
    if drift:
        assert "fail" in verdicts, verdicts  # within `bound` degraded ticks
        first = verdicts.index("fail") + 1
        assert first <= healthy + bound
        assert any("exact_match" in name for name in history[first - 1].failed_rules)
    else:
        assert "fail" not in verdicts, verdicts


def _serve_in_thread(w: Watch) -> threading.Thread:
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    return t


def _wait(pred: Any, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_metrics_exposition_parses_and_names_every_figure(tmp_path: Path) -> None:
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        w = Watch(settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=1, window=2, metrics_port=0))
        t = _serve_in_thread(w)
        _wait(lambda: len(read_history(tmp_path / "w")) >= 3)
        text = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=10).read().decode()
        w.stop()
        t.join(30)
    (tmp_path / "metrics.txt").write_text(text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "evalkit_canary_accuracy",
        "evalkit_canary_accuracy_ci_lower",
        "evalkit_canary_accuracy_ci_upper",
        "evalkit_baseline_accuracy",
        "evalkit_canary_ttft_seconds",
        "evalkit_canary_tpot_seconds",
        "evalkit_canary_e2e_seconds",
        "evalkit_canary_output_tokens_per_second",
        "evalkit_canary_requests",
        "evalkit_canary_error_rate",
        "evalkit_canary_empty_rate",
        "evalkit_canary_truncated_rate",
        "evalkit_watch_ticks",
        "evalkit_watch_ticks_failed",
        "evalkit_watch_verdict",
        "evalkit_watch_verdict_p_value",
        "evalkit_server_kv_cache_usage_ratio",
        "evalkit_server_requests_running",
        "evalkit_server_requests_waiting",
    ):
        assert name in families, name
    samples = {(s.name, s.labels.get("metric")): s.value for f in families.values() for s in f.samples}
    assert samples[("evalkit_watch_verdict", None)] == 1.0
    acc = samples[("evalkit_canary_accuracy", "exact_match,strict-match")]
    assert samples[("evalkit_canary_accuracy_ci_lower", "exact_match,strict-match")] <= acc
    assert samples[("evalkit_canary_accuracy_ci_upper", "exact_match,strict-match")] >= acc
    assert samples[("evalkit_canary_ttft_seconds_count", None)] >= 15
    assert samples[("evalkit_watch_ticks_total", None)] >= 3
    assert samples[("evalkit_watch_ticks_failed_total", None)] == 0  # there from the start: a first failure shows


def test_an_endpoint_outage_is_recorded_tick_by_tick_and_the_watch_carries_on(tmp_path: Path) -> None:
    srv = TestServer(Behaviour(correct_ratio=0.8)).start()
    port = int(srv.base_url.rsplit(":", 1)[1])
    w = Watch(settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=1, window=2, metrics_port=0))
    t = _serve_in_thread(w)
    try:
        _wait(lambda: len(read_history(tmp_path / "w")) >= 2)
        srv.stop()
        _wait(lambda: sum(r.status == "failed" for r in read_history(tmp_path / "w")) >= 2)
        srv = TestServer(Behaviour(correct_ratio=0.8), port=port).start()
        n = len(read_history(tmp_path / "w"))
        _wait(lambda: any(r.status == "ok" for r in read_history(tmp_path / "w")[n:]))
        text = urllib.request.urlopen(f"http://127.0.0.1:{w.metrics_port}/metrics", timeout=10).read().decode()
    finally:
        w.stop()
        t.join(30)
        srv.stop()
    history = read_history(tmp_path / "w")
    failed = [r for r in history if r.status == "failed"]
    assert len(failed) >= 2 and all(r.error for r in failed)
    assert [r.tick for r in history] == list(range(1, len(history) + 1))  # none skipped
    assert history[-1].status == "ok" or any(r.status == "ok" for r in history[n:])
    ticks_failed = next(f for f in text_string_to_metric_families(text) if f.name == "evalkit_watch_ticks_failed")
    assert ticks_failed.samples[0].value >= 2


def test_a_restart_carries_on_after_the_last_recorded_tick(tmp_path: Path) -> None:
    out = tmp_path / "w"
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        Watch(settings(srv.url, out, per_tick=5, baseline_ticks=2, ticks=3)).run()
        # killed after tick 3's run finished but before its history line: the restart runs tick 3 again
        lines = (out / "history.jsonl").read_bytes().splitlines(keepends=True)
        (out / "history.jsonl").write_bytes(b"".join(lines[:2]))
        assert len(srv.requests) == 15
        history = Watch(settings(srv.url, out, per_tick=5, baseline_ticks=2, ticks=5)).run()
        assert len(srv.requests) == 25  # tick 3 resumed from its run dir: nothing of it sent again
    assert [r.tick for r in history] == [1, 2, 3, 4, 5]
    assert [r.verdict for r in history] == ["baseline", "baseline", "pass", "pass", "pass"]
    assert [r.tick for r in read_history(out)] == [1, 2, 3, 4, 5]


def test_a_restart_with_other_settings_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "w"
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        Watch(settings(srv.url, out, per_tick=5, baseline_ticks=1, ticks=1)).run()
        with pytest.raises(Exception, match="other settings \\(per_tick differ\\)"):
            Watch(settings(srv.url, out, per_tick=6, baseline_ticks=1, ticks=2)).run()


class Receiver(BaseHTTPRequestHandler):
    answers: ClassVar[list[int]] = []
    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).got.append(body)
        code = type(self).answers.pop(0) if type(self).answers else 200
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Any:
    Receiver.answers, Receiver.got = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/hook", Receiver
    httpd.shutdown()


def test_the_webhook_is_retried_on_500(receiver: Any) -> None:
    from evalkit.watch import Webhook

    url, rec = receiver
    rec.answers = [500, 503]
    hook = Webhook(url, attempts=4, backoff_s=0.01)
    hook.post({"verdict": "fail"})
    hook.close(timeout_s=10)
    assert [m["verdict"] for m in rec.got] == ["fail"] * 3  # two 5xx, then delivered
    assert (hook.sent, hook.failed) == (1, 0)


def test_a_verdict_change_posts_the_webhook_without_holding_ticks(tmp_path: Path, receiver: Any) -> None:
    url, rec = receiver
    b = Behaviour(correct_ratio=0.8, switch_after=40, switch_to={"correct_ratio": 0.0})
    with TestServer(b) as srv:
        s = settings(
            srv.url,
            tmp_path / "w",
            per_tick=10,
            baseline_ticks=2,
            window=2,
            ticks=6,
            policy=policy_file(tmp_path),
            alert_webhook=url,
        )
        history = Watch(s).run()
    verdicts = [r.verdict for r in history]
    assert verdicts[:3] == ["baseline", "baseline", "pass"] and "fail" in verdicts
    assert [m["verdict"] for m in rec.got] == ["pass", "fail"]
    assert rec.got[1]["previous"] == "pass" and rec.got[1]["failed_rules"]


def test_cli_watch_and_its_report(tmp_path: Path) -> None:
    out = tmp_path / "w"
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        res = CliRunner().invoke(
            app,
            [
                "watch",
                "--endpoint",
                srv.url,
                "--task",
                "gsm8k",
                "--every",
                "0.05s",
                "--per-tick",
                "5",
                "--baseline-ticks",
                "1",
                "--window",
                "2",
                "--ticks",
                "3",
                "--max-tokens",
                "48",
                "-o",
                str(out),
            ],
        )
    assert res.exit_code == 0, res.output
    assert "tick 3: 5 requests, verdict pass" in res.stderr
    res = CliRunner().invoke(app, ["watch", "report", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "watch.html").read_text()
    assert "Content-Security-Policy" in html and "<script src" not in html and "http://" not in html.split("</head>")[0]
    assert "Verdict changes" in html and "window accuracy" in html
    data = json.loads(html.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    acc = next(c for c in data["charts"] if c["id"] == "accuracy")
    assert len(acc["series"][1]["points"]) == 3
    # in percent, as the cards show it, with the 95% interval as one shaded band (its two edges), not two lines
    assert acc["percent"] and acc["y"].endswith("(%)")
    assert [s.get("band") for s in acc["series"]] == [None, None, "lower", "upper", None]
    values = [p["y"] for s in acc["series"][1:] for p in s["points"] if p["y"] is not None]
    assert values and all(0 <= v <= 100 for v in values) and max(values) > 1
    if shutil.which("chromium") or Path("/usr/bin/chromium").exists():
        _band_drawn_in_chromium(out / "watch.html")


def _band_drawn_in_chromium(page: Path) -> None:
    """The band's two edges draw no line of their own, the area between them is filled, the y axis is 0-100%."""
    import asyncio

    from tests.system.test_report_browser import assert_clean, chromium, evaluate, open_page

    check = """(() => { const c = Chart.getChart(document.querySelector('canvas[data-chart="accuracy"]'));
      const ds = c.data.datasets; return {widths: ds.map(d => d.borderWidth), fill: ds.map(d => d.fill),
      max: c.scales.y.max, ticks: c.scales.y.ticks.map(t => t.label)}; })()"""

    async def go() -> None:
        async with chromium() as cdp:
            session, page_log = await open_page(cdp, page)
            seen = await evaluate(cdp, session, check)
            assert seen["widths"][2:4] == [0, 0] and seen["fill"][3] == "-1", seen
            assert seen["max"] == 100 and seen["ticks"] == ["0%", "25%", "50%", "75%", "100%"], seen
            assert_clean(page_log, page)

    asyncio.run(go())


def test_a_slower_endpoint_fails_the_ttft_rule(tmp_path: Path) -> None:
    policy = tmp_path / "speed.yaml"
    policy.write_text("speed: {output_tokens_per_s: null, tpot_p50_ms: null, ttft_p50_ms: {alpha: 0.01}}\n")
    b = Behaviour(correct_ratio=0.8, ttft_s=0.02, switch_after=60, switch_to={"ttft_s": 0.2})
    with TestServer(b) as srv:
        s = settings(
            srv.url, tmp_path / "w", per_tick=20, baseline_ticks=2, window=2, ticks=5, policy=policy, concurrency=8
        )
        history = Watch(s).run()
    verdicts = [r.verdict for r in history]
    assert verdicts[:3] == ["baseline", "baseline", "pass"] and verdicts[4] == "fail"  # tick 5: a window all slow
    assert history[4].failed_rules == ["gsm8k: TTFT p50"]
