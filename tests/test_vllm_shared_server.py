"""The real-vLLM tests that only need an endpoint share one SmolLM2 server (tests/conftest.py's ``smollm2_shared``)
instead of starting one per module, and all carry the pytest-xdist group that keeps them on one worker, so that
scripts/test.sh's parallel run of the real-vLLM tests starts that server once. Collection only: nothing starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vllm_env import SHARED_GROUP, shared_server_config, smollm2_server

REPO = Path(__file__).resolve().parents[1]
# the tests that need a running SmolLM2 endpoint of the default configuration and nothing else
ON_SHARED = {
    "test_lmeval_any_vllm.py": 2,
    "test_lmeval_chat_vllm.py": 1,
    "test_numerics_vllm.py": 2,
    "test_numerics_gate_vllm.py": 1,
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
    items = _collect(*sorted(REPO.glob("tests/test_*vllm*.py")))
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
    dtype: evalkit's CPU choice), plus the endpoint test_lmeval_any_vllm.py's server had on."""
    cfg = shared_server_config()
    assert cfg.model_dump(exclude={"extra_args"}) == smollm2_server().model_dump(exclude={"extra_args"})
    assert cfg.extra_args == ["--no-enable-prefix-caching", "--enable-tokenizer-info-endpoint"]
