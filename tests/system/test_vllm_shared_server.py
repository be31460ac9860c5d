"""The real-vLLM tests that only need an endpoint share one SmolLM2 server (tests/conftest.py's ``smollm2_shared``)
instead of starting one per module, and all carry the pytest-xdist group that keeps them on one worker, so that
scripts/test.sh's parallel run of the real-vLLM tests starts that server once. Collection only: nothing starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_env import SHARED_GROUP, shared_server_config, smollm2_server

REPO = Path(__file__).resolve().parents[2]
# the tests that need a running SmolLM2 endpoint of the default configuration and nothing else
ON_SHARED = {
    "test_lmeval_any_vllm.py": 2,
    "test_lmeval_chat_vllm.py": 1,
    "test_numerics_vllm.py": 3,  # positions, numerics-chat, the numerics gate
    "test_vllm_e2e.py": 4,  # parity, AIME and the conversation (twice); the --serve tests start their own
}


class _Items:
    def __init__(self) -> None:
        self.items: list[pytest.Item] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = list(session.items)


def _collect(*paths: Path) -> list[pytest.Item]:
    grab = _Items()
    rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *map(str, paths)], plugins=[grab])
    assert rc == 0
    return grab.items


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else (mark.args[0] if mark.args else mark.kwargs.get("name"))


def test_endpoint_only_real_vllm_tests_use_the_shared_server_on_one_xdist_worker() -> None:
    items = _collect(*sorted(REPO.glob("tests/system/test_*vllm*.py")))
    shared = [i for i in items if "smollm2_shared" in i.fixturenames]
    by_module: dict[str, int] = {}
    for item in shared:
        by_module[item.path.name] = by_module.get(item.path.name, 0) + 1
    assert by_module == ON_SHARED
    # one worker for all of them (--dist loadgroup), and only they are in the group
    assert {i.nodeid for i in shared} == {i.nodeid for i in items if _group(i) == SHARED_GROUP}
    assert all(i.get_closest_marker("vllm") for i in shared)


def test_the_shared_server_is_the_default_server_with_the_tokenizer_info_endpoint() -> None:
    """The configuration the modules on it started before they shared it: the defaults (prefix caching off, no
    dtype: evalkit's CPU choice, the worker in the engine core), plus the endpoint test_lmeval_any_vllm.py's server
    had on."""
    cfg = shared_server_config()
    assert cfg.model_dump(exclude={"extra_args"}) == smollm2_server().model_dump(exclude={"extra_args"})
    assert cfg.extra_args == [
        "--no-enable-prefix-caching",
        "--distributed-executor-backend",
        "uni",
        "--enable-tokenizer-info-endpoint",
    ]
    assert cfg.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # what lets the CPU platform keep the uni executor


def test_an_xdist_group_stays_on_one_worker_under_loadgroup(tmp_path: Path) -> None:
    """``--dist loadgroup`` keeps a group's tests on one worker (pytest-xdist 3.8 under pytest 9 splits them
    without tests/vllm_env.py's ``keep_xdist_groups``), across modules, marked per test or per module."""

    (tmp_path / "conftest.py").write_text(
        "from tests.vllm_env import keep_xdist_groups\n\n\n"
        "def pytest_collection_modifyitems(config, items):\n    keep_xdist_groups(config, items)\n"
    )
    test = "import time\nimport pytest\n\n\n"
    (tmp_path / "test_a.py").write_text(
        test + '@pytest.mark.xdist_group("g")\n@pytest.mark.parametrize("i", range(3))\n'
        "def test_a(i):\n    time.sleep(0.3)\n\n\n"
        "def test_free(i=0):\n    time.sleep(0.3)\n"
    )
    (tmp_path / "test_b.py").write_text(
        test + 'pytestmark = pytest.mark.xdist_group("g")\n\n\n'
        "def test_b1():\n    time.sleep(0.3)\n\n\n"
        "def test_b2():\n    time.sleep(0.3)\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v",
         "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    ran = re.findall(r"\[(gw\d)\] .*PASSED \S*::(test_\w+)", p.stdout)
    grouped = {gw for gw, name in ran if name.startswith(("test_a", "test_b"))}
    assert len(ran) == 6 and len(grouped) == 1, p.stdout
