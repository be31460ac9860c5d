import os

import pytest

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the commands under test record into the run history: never into the user's own (tests/test_history.py sets its)
os.environ["EVALKIT_HISTORY_URL"] = "off"


@pytest.fixture
def test_server():
    """A fresh deterministic OpenAI-compatible server on a free loopback port (60% right answers)."""
    from evalkit.testing.server import Behaviour, TestServer

    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        yield srv


@pytest.fixture(scope="session")
def smollm2_shared(tmp_path_factory: pytest.TempPathFactory):
    """The real-vLLM SmolLM2 server shared by every test that only needs an endpoint (tests/vllm_env.py:
    ``shared_server_config``), started on first use, stopped when the session ends; its log stays in the
    session's temporary folder. Tests that use it carry ``SHARED_MARKS``."""
    from tests.vllm_env import shared_server

    yield from shared_server(tmp_path_factory.mktemp("smollm2-shared"))


# Timing-sensitive tests: their figures (a stalled event loop, a climb of --concurrency auto, run-to-run speed,
# an achieved request rate) need the cores to themselves, so scripts/test.sh runs them after its parallel phase,
# alone and one at a time. A node id here, or a prefix of one (a module).
SERIAL = (
    "tests/test_worker.py::test_a_scorer_holding_the_gil_does_not_stall_the_timing_loop",
    "tests/test_auto_concurrency.py",
    "tests/test_gate_speed.py",
    "tests/test_steady_state.py",
    "tests/test_arrivals.py::test_achieved_rate_is_within_3_percent_of_200_per_second_over_10000_arrivals",
    "tests/test_warmup.py::test_default_warmup_takes_the_first_batch_stall_out_of_ttft",
    "tests/test_client_cost_guard.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.vllm_env import keep_xdist_groups

    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
    keep_xdist_groups(config, items)
