"""evalkit watch fails closed: a canary that cannot judge says so (history, /metrics, exit status, report) and
never shows a pass; each tick sends exactly --per-tick documents for every task kind; the window's status
counts are the gate's; bad --metrics-port/--metrics-addr and webhook URLs are one-line errors, webhook
credentials are sent as Basic auth and secrets are redacted from warnings.

Here: those of its tests that run in-process; the others are in tests/integration/test_watch_failclosed.py."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.integration.test_watch_monitoring import check_expr, exported, rules
from tests.unit.test_watch_monitoring import MONITORING

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------------------------------------ monitoring


def test_an_alert_fires_when_the_watch_cannot_judge_and_the_dashboard_shows_it() -> None:
    names = exported()
    assert "evalkit_watch_can_judge" in names
    alert = next(r for r in rules() if r["alert"] == "EvalkitWatchCannotJudge")
    assert alert["expr"] == "evalkit_watch_can_judge == 0" and alert["labels"]["severity"] == "critical"
    check_expr(alert["expr"], names)
    dash = json.loads((MONITORING / "grafana" / "dashboards" / "evalkit-watch.json").read_text())
    panel = next(p for p in dash["panels"] if p["title"].startswith("Verdict history"))
    assert "evalkit_watch_can_judge" in panel["targets"][0]["expr"]
    assert panel["fieldConfig"]["defaults"]["mappings"][0]["options"]["-1"]["text"] == "cannot decide"
    assert yaml.safe_load((MONITORING / "alerts.yml").read_text())  # still one YAML document
