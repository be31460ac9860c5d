"""evalkit watch fails closed: a canary that cannot judge says so (history, /metrics, exit status, report) and
never shows a pass; each tick sends exactly --per-tick documents for every task kind; the window's status
counts are the gate's; bad --metrics-port/--metrics-addr and webhook URLs are one-line errors, webhook
credentials are sent as Basic auth and secrets are redacted from warnings."""

from __future__ import annotations

import base64
import json
import socket
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.errors import ConfigError
from evalkit.runner import Runner
from evalkit.testing.server import Behaviour, TestServer
from evalkit.watch import Watch, WatchMetrics, Webhook, read_history
from evalkit.watch.tick_log import exit_code
from evalkit.watch.webhook import webhook_target
from tests.integration.test_watch import baseline_run
from tests.unit.test_watch import RUN, settings

pytestmark = pytest.mark.slow

ACCURACY_ONLY = (
    "accuracy: {default: {alpha: 0.01}}\nspeed: {output_tokens_per_s: null, ttft_p50_ms: null, tpot_p50_ms: null}\n"
)


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(metrics: WatchMetrics) -> dict[str, float]:
    text = generate_latest(metrics.registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def write_policy(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


# ------------------------------------------------------------------------------------------- 9: no usable baseline


def test_baseline_ticks_answered_only_by_errors_never_give_a_pass(tmp_path: Path) -> None:
    """Baseline ticks that got only api_error, then an endpoint answering 0% right: every later tick is
    cannot_decide with the reason (the old watch passed every one: no pair to compare, error rate improved)."""
    with TestServer(Behaviour(correct_ratio=0.0)) as srv:
        srv.faults.extend([{"status": 500}] * (5 * 2 * 2))  # 5 documents x 2 attempts x 2 baseline ticks
        w = Watch(settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=2, window=2, ticks=4))
        history = w.run()
    assert [r.verdict for r in history] == ["baseline", "baseline", "cannot_decide", "cannot_decide"]
    assert history[0].counts["api_error"] == 5 and history[2].counts["api_error"] == 0
    for r in history[2:]:
        assert r.reason is not None and r.reason.startswith("no usable baseline: no scored answer in the first 2 ticks")
    assert [r["verdict"] for r in map(orjson.loads, (tmp_path / "w" / "history.jsonl").read_bytes().splitlines())][
        2:
    ] == ["cannot_decide"] * 2
    m = samples(w.metrics)
    assert m["evalkit_watch_can_judge"] == 0 and "evalkit_watch_verdict" not in m
    assert exit_code(history) == 2


# --------------------------------------------------------------------------------------------- 10: outages


@pytest.mark.parametrize("with_baseline", [False, True])
def test_an_endpoint_down_for_every_tick_exits_2_and_says_why(tmp_path: Path, with_baseline: bool) -> None:
    """The endpoint down from the first tick: every tick is cannot_decide with its reason in the history, the
    command exits 2 with one line saying so, and the report marks the ticks (the old watch: verdict none, exit 0)."""
    out = tmp_path / "w"
    extra: list[str] = []
    if with_baseline:
        with TestServer(Behaviour(correct_ratio=0.8)) as srv:
            extra = ["--baseline", str(baseline_run(srv.url, tmp_path / "base", 10))]
    down = f"http://127.0.0.1:{closed_port()}/v1"
    args = ["watch", "--endpoint", down, "--task", "gsm8k", "--every", "0.05s", "--per-tick", "5"]
    args += ["--baseline-ticks", "2", "--ticks", "3", "--max-tokens", "48", "--model", "m", "-o", str(out), *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("evalkit watch: cannot decide (tick 3): tick 3 failed: cannot connect"), last
    history = read_history(out)
    assert [r.verdict for r in history] == ["cannot_decide"] * 3
    assert all(r.status == "failed" and r.reason and "cannot connect" in r.reason for r in history)
    if not with_baseline:  # past the baseline ticks the reason also says there is no baseline
        assert "no usable baseline: every one of the first 2 ticks" in str(history[2].reason)
    res = CliRunner().invoke(app, ["watch", "report", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "watch.html").read_text()
    assert "3 could not decide" in html and html.count('class="txt verdict-cannot_decide"') == 3
    assert "cannot connect" in html


def test_an_outage_after_passing_ticks_takes_the_pass_off_metrics(tmp_path: Path) -> None:
    """Ticks pass, then the endpoint goes away: the failed ticks are cannot_decide, evalkit_watch_can_judge goes
    to 0 and evalkit_watch_verdict disappears (the old watch kept exporting the last pass); exit status 2."""
    srv = TestServer(Behaviour(correct_ratio=0.8)).start()
    seen: dict[int, dict[str, float]] = {}
    w: Watch

    def echo(line: str) -> None:
        tick = int(line.split(":", 1)[0].split()[1])
        seen[tick] = samples(w.metrics)
        if tick == 3:
            srv.stop()

    try:
        w = Watch(settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=1, window=2, ticks=5), echo=echo)
        history = w.run()
    finally:
        srv.stop()
    assert [r.verdict for r in history] == ["baseline", "pass", "pass", "cannot_decide", "cannot_decide"]
    assert seen[1]["evalkit_watch_can_judge"] == 0 and "evalkit_watch_verdict" not in seen[1]  # baseline forming
    assert seen[3]["evalkit_watch_can_judge"] == 1 and seen[3]["evalkit_watch_verdict"] == 1
    for tick in (4, 5):
        assert seen[tick]["evalkit_watch_can_judge"] == 0
        assert "evalkit_watch_verdict" not in seen[tick] and "evalkit_watch_verdict_p_value" not in seen[tick]
    assert history[3].reason is not None and history[3].reason.startswith("tick 4 failed: cannot connect")
    assert exit_code(history) == 2


def test_the_webhook_posts_when_the_watch_can_no_longer_judge(tmp_path: Path, receiver: Any) -> None:
    url, got = receiver
    srv = TestServer(Behaviour(correct_ratio=0.8)).start()

    def echo(line: str) -> None:
        if line.startswith("tick 2:"):
            srv.stop()

    try:
        s = settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=1, window=2, ticks=3, alert_webhook=url)
        Watch(s, echo=echo).run()
    finally:
        srv.stop()
    assert [(m["verdict"], m["previous"]) for m in got.bodies] == [("pass", None), ("cannot_decide", "pass")]
    assert got.bodies[1]["reason"].startswith("tick 3 failed: cannot connect")


# ------------------------------------------------------------------------------------- 11: the canary's load


def test_a_baseline_with_no_scored_document_is_refused_at_start(tmp_path: Path) -> None:
    """Every baseline request failed: the watch refuses to start in one line (the old one rotated through no
    documents, and an empty selection is none: each tick sent all 1,319 documents to production)."""
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        srv.faults.extend([{"status": 500}] * 5)
        cfg = {"tasks": ["gsm8k"], "endpoint": srv.url, "limit": 5, "output_dir": tmp_path / "base"}
        Runner(load_config({**cfg, "report": False, "max_error_rate": 1.0, "max_attempts": 1, **RUN})).run()
        sent = len(srv.requests)
        with pytest.raises(ConfigError) as err:
            Watch(settings(srv.url, tmp_path / "w", baseline=tmp_path / "base", ticks=1, per_tick=5)).run()
        assert len(srv.requests) == sent  # not one canary request
    assert str(err.value) == (
        f"the baseline {tmp_path / 'base'} has no scored gsm8k document (5 of its 5 requests api_error); "
        "pass a baseline run that got answers"
    )


def test_coverage_is_measured_on_the_windows_documents_not_the_whole_baseline(tmp_path: Path) -> None:
    """A baseline that failed 10 of its 40 documents: the ticks rotate through the 30 it scored, and the window's
    documents (the union of its ticks' asked_docs) are all covered, so the watch passes; measured against the
    whole baseline (75% scored, under min_coverage) it could never decide."""
    with TestServer(Behaviour(correct_ratio=0.8)) as srv:
        srv.faults.extend([{"status": 500}] * 10)
        cfg = {"tasks": ["gsm8k"], "endpoint": srv.url, "limit": 40, "output_dir": tmp_path / "base", "concurrency": 1}
        Runner(load_config({**cfg, "report": False, "max_error_rate": 1.0, "max_attempts": 1, **RUN})).run()
        policy = write_policy(tmp_path, ACCURACY_ONLY)
        s = settings(srv.url, tmp_path / "w", baseline=tmp_path / "base", per_tick=10, window=2, ticks=3, policy=policy)
        history = Watch(s).run()
    scored = {r["doc_id"] for r in map(orjson.loads, (tmp_path / "base" / "samples.jsonl").read_bytes().splitlines())
              if r["status"] != "api_error"}  # fmt: skip
    assert len(scored) == 30
    assert all(set(r.docs) <= scored for r in history)
    assert [r.verdict for r in history] == ["pass"] * 3, [r.reason for r in history]


@pytest.mark.parametrize(
    ("task", "samples_per_doc"),
    [("gsm8k", 1), ("aime25", 2), ("bfcl-simple", 1), ("bfcl-parallel-multiple", 1), ("bfcl-multi-turn-base", 1)],
)
def test_each_tick_sends_exactly_per_tick_documents_for_every_task_kind(
    tmp_path: Path, task: str, samples_per_doc: int
) -> None:
    """--per-tick 3: each tick's run holds the 3 documents of its slice (x the task's samples), for lm-eval,
    python, tool-call and multi-turn tasks (the old tool-call tasks ignored the selection: 400 / 200 a tick)."""
    run = {"max_tokens": 48, "num_samples": samples_per_doc} if task == "aime25" else {}
    with TestServer(Behaviour(correct_ratio=0.8, max_model_len=65536)) as srv:
        s = settings(srv.url, tmp_path / "w", task=task, per_tick=3, baseline_ticks=1, window=2, ticks=2, run=run)
        history = Watch(s).run()
    for rec in history:
        assert rec.status == "ok" and len(rec.docs) == 3
        recs = [orjson.loads(x) for x in (tmp_path / "w" / rec.dir / "samples.jsonl").read_bytes().splitlines()]
        assert sorted({r["doc_id"] for r in recs}) == rec.docs
        assert len(recs) == 3 * samples_per_doc == rec.counts["total"]


LOOSE_YAML = """\
name: loose
kind: python
version: "1"
module: loose.py
data:
  test: loose.jsonl
endpoint_kind: completions
"""

LOOSE_PY = """
from evalkit.contracts import GenParams, MetricValue, Request, Score
from evalkit.tasks.base import Task

class Loose(Task):  # builds every document whatever the selection
    def __init__(self, root):
        self.name, self.version, self.data_files = "loose", "1", {"test": root / "loose.jsonl"}
    def defaults(self):
        return {"max_tokens": 8}
    def build_requests(self, settings):
        return [Request(task="loose", doc_id=i, sample_index=0, prompt=f"q {i}", gen=GenParams(max_tokens=8))
                for i in range(12)]
    def score(self, request, response):
        return Score(status="ok", correct={"x": True})
    def summarize(self, records):
        return {"n": MetricValue(value=1.0, n=len(records))}, {}

def make_task(spec, root):
    return Loose(root)
"""


def test_a_task_that_ignores_the_document_selection_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "loose.yaml").write_text(LOOSE_YAML)
    (d / "loose.py").write_text(textwrap.dedent(LOOSE_PY))
    (d / "loose.jsonl").write_text('{"q": 1}\n')
    with TestServer(Behaviour()) as srv:
        s = settings(srv.url, tmp_path / "w", task="loose", per_tick=3, ticks=1, run={"tasks_dir": [d]})
        with pytest.raises(ConfigError, match="task loose does not keep to a document selection"):
            Watch(s).run()
        assert srv.requests == []


# -------------------------------------------------------------------------------- 12: one code path for counts


def test_max_tool_text_rate_zero_fails_the_watch_when_calls_come_back_as_text(tmp_path: Path) -> None:
    """The server stops parsing tool calls after the baseline ticks: the window's counts hold every tick's
    tool_text (the gate's StatusCounts.combined), so max_tool_text_rate: 0 fails (the old merge dropped them)."""
    policy = write_policy(
        tmp_path,
        "accuracy: {default: {enabled: false}}\n"
        "speed: {output_tokens_per_s: null, ttft_p50_ms: null, tpot_p50_ms: null}\n"
        "rates: {max_tool_text_rate: 0}\n",
    )
    b = Behaviour(tool_variant="right", switch_after=20, switch_to={"tool_variant": "text"})
    with TestServer(b) as srv:
        s = settings(
            srv.url, tmp_path / "w", task="bfcl-simple", per_tick=10, baseline_ticks=2, window=2, ticks=4, run={}
        )
        s.policy = policy
        history = Watch(s).run()
    assert [r.verdict for r in history] == ["baseline", "baseline", "fail", "fail"]
    last = history[-1]
    assert "bfcl-simple: unparsed tool-call rate" in last.failed_rules
    ticks = [r for r in history if r.tick in last.window["ticks"]]
    assert last.window["counts"]["tool_text"] == sum(r.counts["tool_text"] for r in ticks) == 20
    rule = next(r for r in last.rules if r["name"] == "bfcl-simple: unparsed tool-call rate")
    assert rule["note"].startswith("20 of 20 requests tool_text"), rule["note"]


# ---------------------------------------------------------------------------- 13: ports, addresses, webhooks


@pytest.fixture
def taken_port() -> Any:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield int(s.getsockname()[1])
    s.close()


@pytest.mark.parametrize(
    ("port", "addr", "expected"),
    [
        ("taken", "127.0.0.1", "cannot serve /metrics on 127.0.0.1:{taken} (Address already in use); pass another"),
        ("99999", "127.0.0.1", "--metrics-port 99999 is not a port; pass 0..65535 (0: a free one)"),
        ("-1", "127.0.0.1", "--metrics-port -1 is not a port; pass 0..65535 (0: a free one)"),
        ("0", "not an address", "--metrics-addr 'not an address' is not an address of this host"),
        ("0", "192.0.2.1", "cannot serve /metrics on 192.0.2.1:0 (Cannot assign requested address); pass"),
    ],
)
def test_a_bad_metrics_port_or_address_is_one_line(
    tmp_path: Path, taken_port: int, port: str, addr: str, expected: str
) -> None:
    port = str(taken_port) if port == "taken" else port
    down = f"http://127.0.0.1:{closed_port()}/v1"
    args = ["watch", "--endpoint", down, "--task", "gsm8k", "--ticks", "1", "-o", str(tmp_path / "w")]
    res = CliRunner().invoke(app, [*args, "--metrics-port", port, "--metrics-addr", addr])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit)  # not a traceback
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: error: " + expected.format(taken=taken_port)), lines
    assert not (tmp_path / "w" / "ticks").exists()  # refused before any tick


class Hook(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []
    auth: ClassVar[list[str | None]] = []

    def do_POST(self) -> None:
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        type(self).auth.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Any:
    Hook.bodies, Hook.auth = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/hook", Hook
    httpd.shutdown()
    httpd.server_close()


def test_webhook_credentials_in_the_url_are_sent_as_basic_auth(receiver: Any) -> None:
    """``http://user:p%40ss@host/hook`` is delivered with ``Authorization: Basic`` (the old webhook never
    delivered: urllib took ``user:p%40ss@127.0.0.1`` for the host)."""
    url, got = receiver
    hook = Webhook(url.replace("http://", "http://alert:p%40ss@") + "?channel=ops", attempts=2, backoff_s=0.01)
    hook.post({"verdict": "fail"})
    hook.close(timeout_s=10)
    assert (hook.sent, hook.failed) == (1, 0)
    assert got.bodies == [{"verdict": "fail"}]
    assert got.auth == ["Basic " + base64.b64encode(b"alert:p@ss").decode()]
    assert hook.shown == url.replace("http://", "http://***@") + "?channel=ops"


def test_webhook_warnings_redact_credentials_and_query_secrets(capfd: pytest.CaptureFixture[str]) -> None:
    url = f"http://alert:hunter2@127.0.0.1:{closed_port()}/hook?token=s3cr3t-tok&channel=ops&sig=abc"
    hook = Webhook(url, attempts=1)
    hook.post({"verdict": "fail"})
    hook.close(timeout_s=10)
    err = capfd.readouterr().err
    assert hook.failed == 1 and "alert webhook http://***@127.0.0.1:" in err
    assert "?token=***&channel=ops&sig=***" in err
    assert "s3cr3t-tok" not in err and "hunter2" not in err and "abc" not in err


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file:///tmp/alerts.json", "is not an http(s) URL with a host"),
        ("ftp://hooks.example.com/x", "is not an http(s) URL with a host"),
        ("hooks.example.com/evalkit", "is not an http(s) URL with a host"),
        ("http:///evalkit", "is not an http(s) URL with a host"),
        ("https://hooks.example.com:99999/x", "is not a valid URL (Port out of range 0-65535)"),
        ("https://u:pw@hooks.example.com:http/x?token=t0k", "is not a valid URL"),
    ],
)
def test_a_webhook_url_other_than_http_with_a_host_is_refused(tmp_path: Path, url: str, why: str) -> None:
    """Refused at start in one line, the URL shown redacted (the old webhook took file:// and "sent" it)."""
    with pytest.raises(ConfigError) as err:
        webhook_target(url)
    msg = str(err.value)
    assert why in msg and "pass an http(s) URL such as https://hooks.example.com/evalkit" in msg
    assert "pw" not in msg and "t0k" not in msg
    with pytest.raises(ConfigError):
        Webhook(url)
    with pytest.raises(ConfigError, match="--alert-webhook"):
        Watch(settings(f"http://127.0.0.1:{closed_port()}/v1", tmp_path / "w", alert_webhook=url))


# ------------------------------------------------------------------------------- speed at the canary's own load


@pytest.mark.parametrize(
    ("canary", "why"),
    [
        ({"concurrency": 2, "request_rate": None}, "baseline ran at concurrency 4, candidate at 2"),
        (
            {"concurrency": 4, "request_rate": 50.0},
            "baseline sent as fast as its concurrency allowed, candidate 50 requests/s",
        ),
    ],
)
def test_speed_against_a_baseline_at_another_load_is_not_judged(
    tmp_path: Path, canary: dict[str, Any], why: str
) -> None:
    """A --baseline run at concurrency 4 with no request rate: a canary at concurrency 2, or at 4 but paced at a
    request rate, is another load, so its speed rules are skipped with the reason (the window used to lose its
    ticks' request rate and judged the paced canary as the baseline's load)."""
    with TestServer(Behaviour(ttft_s=0.01, itl_s=0.002)) as srv:
        base = baseline_run(srv.url, tmp_path / "base", limit=10)
        s = settings(srv.url, tmp_path / "w", baseline=base, per_tick=10, window=2, ticks=2, **canary)
        history = Watch(s).run()
    assert [r.verdict for r in history] == ["pass", "pass"], [r.reason for r in history]
    speed = [rule for r in history for rule in r.rules if rule["name"].endswith(("tokens/s", "TTFT p50", "TPOT p50"))]
    assert speed and all(rule["verdict"] == "skip" and why in rule["note"] for rule in speed), speed


def test_a_watch_whose_ticks_were_all_baseline_exits_2(tmp_path: Path) -> None:
    """--ticks 2 with 3 baseline ticks: no tick was judged, so the watch cannot say the endpoint is healthy."""
    with TestServer(Behaviour()) as srv:
        history = Watch(settings(srv.url, tmp_path / "w", per_tick=5, baseline_ticks=3, ticks=2)).run()
    assert [r.verdict for r in history] == ["baseline", "baseline"]
    assert exit_code(history) == 2
