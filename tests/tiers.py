"""The test tiers (tests/unit, tests/integration, tests/system) and the rules that keep them honest.

- ``unit``: in-process only: no test server, no subprocess, no connection to another process.
- ``integration``: the bundled test server (``evalkit/testing/``) and subprocesses of evalkit.
- ``system``: real vLLM, docker, PostgreSQL, headless Chromium, wheel builds, multi-run timing.

Each test is marked with its folder's tier; a test whose fixtures or marks need a higher tier than its folder's fails
at setup, saying where to move it; a test in tests/unit that opens a connection or starts a process fails, naming the
call (``unit_guard``). tests/conftest.py imports these hooks and the fixture."""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "integration", "system")
# the tier a fixture (by name) or a mark needs: the test server and in-process HTTP servers, or the real thing
FIXTURE_TIERS = {
    "test_server": "integration",
    "server": "integration",
    "srv": "integration",
    "servers": "integration",
    "keyed_server": "integration",
    "fast_server": "integration",
    "default_server": "integration",
    "receiver": "integration",
    "taken_port": "integration",
    "live_server": "system",
    "smollm2_shared": "system",
    "vllm_parser": "system",
    "chromium": "system",
    "wheel": "system",
    "venv": "system",
}
MARK_TIERS = {"vllm": "system", "gpu": "system", "browser": "system"}
# a parametrized fixture whose one value is a real server: (fixture, value) -> tier
PARAM_TIERS = {("db_url", "postgresql"): "system"}
MOVE = {
    "integration": "tests/integration (the test server, subprocesses of evalkit)",
    "system": "tests/system (real vLLM, docker, PostgreSQL, browser, wheel, multi-run timing)",
}


def folder_tier(path: Path) -> str | None:
    """The tier named by the nearest tier folder above ``path`` (None for a test outside the tier folders)."""
    return next((part for part in reversed(path.parts[:-1]) if part in TIERS), None)


def needed_tier(item: pytest.Item) -> str:
    """The lowest tier whose rules allow what ``item``'s fixtures and marks use."""
    needs = ["unit"]
    fixtures = set(getattr(item, "fixturenames", ())) - _direct_parameters(item)
    needs += [FIXTURE_TIERS[f] for f in fixtures if f in FIXTURE_TIERS]
    needs += [MARK_TIERS[m.name] for m in item.iter_markers() if m.name in MARK_TIERS]
    params = getattr(getattr(item, "callspec", None), "params", {})
    needs += [tier for (name, value), tier in PARAM_TIERS.items() if params.get(name) == value]
    return max(needs, key=TIERS.index)


def _direct_parameters(item: pytest.Item) -> set[str]:
    """The names ``@pytest.mark.parametrize`` gives values directly (not fixtures, whatever they are called)."""
    names: set[str] = set()
    for mark in item.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs["argnames"]
        argnames = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        indirect = mark.kwargs.get("indirect", False)
        names |= {
            a for a in argnames if not (indirect is True or (isinstance(indirect, (list, tuple)) and a in indirect))
        }
    return names


def mark_tiers(items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier (or, outside the tier folders, the tier its fixtures need) and keep
    the tier its fixtures need for ``check_tier`` (new tests sit at tests/ top level until placed)."""
    for item in items:
        need = needed_tier(item)
        item.stash[_NEEDED] = need
        item.add_marker(getattr(pytest.mark, folder_tier(Path(str(item.path))) or need))


_NEEDED = pytest.StashKey[str]()


def check_tier(item: pytest.Item) -> None:
    """Fail a test that sits in a tier below what its fixtures or marks need, saying where it belongs."""
    here = folder_tier(Path(str(item.path)))
    need = item.stash.get(_NEEDED, "unit")
    if here is not None and TIERS.index(need) > TIERS.index(here):
        pytest.fail(
            f"{item.nodeid} uses what tests/{here} may not (its fixtures or marks need {need}): "
            f"move it to {MOVE[need]}",
            pytrace=False,
        )


class _Refused(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def unit_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In tests/unit, a connection (``socket.connect``), a subprocess (``subprocess.Popen``, ``os.system``,
    ``os.fork``) or a child process (``multiprocessing``) raises, and the test fails naming the call, even where the
    call was made in a thread that swallowed the error."""
    if folder_tier(Path(str(request.node.path))) != "unit":
        yield
        return
    refused: list[str] = []

    def refuse(what: str) -> Any:
        message = (
            f"tests/unit is in-process only, and this test {what}: move it to tests/integration "
            "(or tests/system for real vLLM, PostgreSQL, docker, a browser)"
        )
        refused.append(message)
        raise _Refused(message)

    def connect(self: socket.socket, address: Any) -> Any:
        return refuse(f"opened a connection to {address!r}")

    def popen(self: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
        refuse(f"started a subprocess {args!r}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(os, "system", lambda command: refuse(f"ran {command!r} (os.system)"))
    monkeypatch.setattr(os, "fork", lambda: refuse("forked (os.fork)"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", lambda self: refuse("started a child process"))
    yield
    if refused:
        pytest.fail(refused[0], pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_tiers(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    check_tier(item)
