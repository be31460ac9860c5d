"""docker/monitoring with Debian's Prometheus: `promtool check rules/config`, the alert rules' unit tests
(docker/monitoring/alerts_test.yml: each alert fires where it should and stays quiet where it should not, and a
broken expression fails them), and a real Prometheus scraping a running `evalkit watch` and evaluating the rules
on what it serves. Skipped where promtool or prometheus is missing (`apt-get install prometheus`; .ci/run does).

Here: those of its tests that run in-process; the others are in tests/system/test_prometheus.py."""

from __future__ import annotations

import yaml

from tests.system.test_prometheus import MONITORING, alerts


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not() -> None:
    doc = yaml.safe_load((MONITORING / "alerts_test.yml").read_text())
    assert doc["rule_files"] == ["alerts.yml"]
    cases = [c for t in doc["tests"] for c in t["alert_rule_test"]]
    for name in (r["alert"] for r in alerts()):
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no case where it stays quiet"
