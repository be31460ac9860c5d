"""docker/monitoring: the alert rules and the Grafana dashboard parse (PromQL by promql-parser) and ask only for
metrics that evalkit watch exports.

Here: those of its tests that run in-process; the others are in tests/integration/test_watch_monitoring.py."""

from __future__ import annotations

import yaml

from tests.integration.test_watch_monitoring import MONITORING


def test_prometheus_config_loads_the_rules_and_scrapes_the_watch() -> None:
    cfg = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert cfg["rule_files"] == ["alerts.yml"]  # beside the config, as compose mounts both
    targets = [t for job in cfg["scrape_configs"] for s in job["static_configs"] for t in s["targets"]]
    assert "evalkit-watch:9464" in targets
    prov = MONITORING / "grafana" / "provisioning"
    assert (
        yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"][0]["uid"] == "prometheus"
    )
    assert yaml.safe_load((prov / "dashboards" / "evalkit.yml").read_text())["providers"][0]["type"] == "file"
