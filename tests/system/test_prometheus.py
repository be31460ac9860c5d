"""docker/monitoring with Debian's Prometheus: `promtool check rules/config`, the alert rules' unit tests
(docker/monitoring/alerts_test.yml: each alert fires where it should and stays quiet where it should not, and a
broken expression fails them), and a real Prometheus scraping a running `evalkit watch` and evaluating the rules
on what it serves. Skipped where promtool or prometheus is missing (`apt-get install prometheus`; .ci/run does)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.testing.server import Behaviour, TestServer
from evalkit.watch import Watch
from tests.unit.test_watch import settings

MONITORING = Path(__file__).resolve().parents[2] / "docker" / "monitoring"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool (apt-get install prometheus)")


def promtool(*args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


@needs_promtool
def test_promtool_checks_the_rules_and_the_config() -> None:
    res = promtool("check", "rules", "alerts.yml")
    assert res.returncode == 0 and f"SUCCESS: {len(alerts())} rules found" in res.stdout, res.stdout + res.stderr
    res = promtool("check", "config", "prometheus.yml")
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
def test_the_alert_unit_tests_pass() -> None:
    res = promtool("test", "rules", "alerts_test.yml")
    assert res.returncode == 0, res.stdout + res.stderr


@needs_promtool
@pytest.mark.parametrize("name", [r["alert"] for r in alerts()])
@pytest.mark.parametrize("broken", ["never", "always"])
def test_a_broken_alert_expression_fails_the_unit_tests(tmp_path: Path, name: str, broken: str) -> None:
    """An expression that can never fire, or that fires on anything, fails the promtool unit tests."""
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    for rule in (r for g in doc["groups"] for r in g["rules"] if r["alert"] == name):
        rule["expr"] = "vector(1) < 0" if broken == "never" else f"({rule['expr']}) or vector(1)"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(doc))
    shutil.copy(MONITORING / "alerts_test.yml", tmp_path)
    res = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert res.returncode == 1 and f"alertname: {name}," in res.stderr, res.stdout + res.stderr


# ------------------------------------------------------------------- a real Prometheus scraping evalkit watch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return body["data"]


def wait_for(what: str, pred: Any, timeout: float = 90.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        try:
            if got := pred():
                return got
        except OSError:  # Prometheus not listening yet
            pass
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.5)


def alert_states(base: str) -> dict[str, str]:
    return {a["labels"]["alertname"]: a["state"] for a in api(base, "alerts")["alerts"]}


def alert_in_state(base: str, name: str, state: str) -> dict[str, str] | None:
    """Every alert's state, once ``name`` is in ``state``."""
    states = alert_states(base)
    return states if states.get(name) == state else None


def evaluated_rules(base: str, after: float) -> dict[str, Any] | None:
    """The rules by name, once each has been evaluated after the wall-clock time ``after``."""
    rules = {r["name"]: r for g in api(base, "rules")["groups"] for r in g["rules"]}
    evaluated = [datetime.fromisoformat(r["lastEvaluation"]).timestamp() for r in rules.values()]
    return rules if rules and min(evaluated) > after else None


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus (apt-get install prometheus)")
def test_prometheus_scrapes_a_running_watch_and_evaluates_the_rules(tmp_path: Path) -> None:
    """Prometheus (1 s scrapes and rule evaluations, docker/monitoring/alerts.yml) scrapes `evalkit watch` against
    the test server: every rule evaluates without error, nothing fires while the watch passes; an outage fires
    EvalkitTicksFailing, leaves EvalkitWatchCannotJudge pending and never EvalkitVerdictFailed (fail closed)."""
    srv = TestServer(Behaviour(correct_ratio=0.8)).start()
    w = Watch(settings(srv.url, tmp_path / "w", every_s=0.5, per_tick=5, baseline_ticks=1, window=2, metrics_port=0))
    watch = threading.Thread(target=w.run, daemon=True)
    watch.start()
    wait_for("the watch's /metrics", lambda: w.metrics_port)
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "alerts.yml")],
        "scrape_configs": [
            {"job_name": "evalkit-watch", "static_configs": [{"targets": [f"127.0.0.1:{w.metrics_port}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    assert PROMETHEUS is not None
    cmd = [
        PROMETHEUS,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    base = f"http://127.0.0.1:{port}"
    with (tmp_path / "prometheus.log").open("w") as log:
        prom = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        targets = lambda: api(base, "targets")["activeTargets"]  # noqa: E731
        wait_for("the watch's target up", lambda: any(t["health"] == "up" for t in targets()))
        passing = 'evalkit_watch_verdict{job="evalkit-watch", task="gsm8k"} == 1'
        wait_for("a pass verdict scraped", lambda: api(base, "query", query=passing)["result"])
        # an evaluation before that scrape saw the baseline tick's can_judge 0 (CannotJudge pending): judge the
        # alerts on evaluations that saw the pass
        scraped = time.time()
        rules = wait_for("every rule evaluated on the pass", lambda: evaluated_rules(base, after=scraped))
        assert set(rules) == {a["alert"] for a in alerts()}
        assert all(r["health"] == "ok" for r in rules.values()), {n: r.get("lastError") for n, r in rules.items()}
        assert alert_states(base) == {}  # a passing watch: nothing pending, nothing firing

        srv.stop()  # outage: ticks fail from now on
        wait_for("EvalkitTicksFailing firing", lambda: alert_in_state(base, "EvalkitTicksFailing", "firing"))
        wait_for("can_judge 0 scraped", lambda: api(base, "query", query="evalkit_watch_can_judge == 0")["result"])
        states = wait_for("CannotJudge pending", lambda: alert_in_state(base, "EvalkitWatchCannotJudge", "pending"))
        assert "EvalkitVerdictFailed" not in states
        assert not api(base, "query", query="evalkit_watch_verdict")["result"]  # no stale pass, no fail
    finally:
        prom.terminate()
        prom.wait(30)
        w.stop()
        watch.join(30)
        srv.stop()
