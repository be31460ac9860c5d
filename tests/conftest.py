import contextlib
import os

import pytest

from tests import tiers
from tests.tiers import pytest_runtest_setup, unit_guard  # noqa: F401 (hooks: the tiers' rules)

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the commands under test record into the run history: never into the user's own (the history tests set theirs)
os.environ["EVALKIT_HISTORY_URL"] = "off"


@pytest.fixture
def lm_eval_cache(tmp_path, monkeypatch):
    """A fresh evalkit cache for the test (``EVALKIT_CACHE_DIR``: its prompt cache and generated lm-eval task files)
    holding a link to the kept index of lm-eval's own tasks in the default cache, made there once when missing:
    indexing lm-eval's tasks takes seconds, which each test's own cache would otherwise pay again."""
    from evalkit.tasks import lmeval_source

    monkeypatch.delenv("EVALKIT_CACHE_DIR", raising=False)
    kept = lmeval_source.bundled_index_path()
    if not kept.is_file():
        lmeval_source.bundled_task_index()
    cache = tmp_path / "cache"
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(cache))
    link = lmeval_source.bundled_index_path()
    link.parent.mkdir(parents=True)
    with contextlib.suppress(OSError):  # another file system, or the kept file could not be written
        os.link(kept, link)
    return cache


@pytest.fixture
def test_server():
    """A fresh deterministic OpenAI-compatible server on a free loopback port (60% right answers)."""
    from evalkit.testing.server import Behaviour, TestServer

    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        yield srv


@pytest.fixture(scope="session")
def smollm2_shared(tmp_path_factory: pytest.TempPathFactory):
    """The real-vLLM SmolLM2 server shared by the tests that only need an endpoint (tests/vllm_env.py:
    ``shared_server_config``), started on first use, stopped when the session ends; its log stays in the session's
    temporary folder. Tests that use it carry ``SHARED_MARKS``."""
    from tests.vllm_env import shared_server

    yield from shared_server(tmp_path_factory.mktemp("smollm2-shared"))


# Timing-sensitive tests: their figures (a stalled event loop, a climb of --concurrency auto, run-to-run speed,
# an achieved request rate) need a core whenever their threads wake, so scripts/test.sh runs them one at a time, with
# the parallel tests beside them only at the kernel's idle priority (SCHED_IDLE). A node id here, or a prefix of one.
SERIAL = (
    "tests/integration/test_worker.py::test_a_scorer_holding_the_gil_does_not_stall_the_timing_loop",
    "tests/integration/test_auto_concurrency.py",
    "tests/system/test_gate_speed.py",
    "tests/integration/test_steady_state.py",
    "tests/unit/test_steady_state.py",
    "tests/integration/test_arrivals.py::test_achieved_rate_is_within_3_percent_of_200_per_second_over_10000_arrivals",
    "tests/integration/test_warmup.py::test_default_warmup_takes_the_first_batch_stall_out_of_ttft",
    # its client and test server share one process: a second's starvation of that process on loaded cores reads as
    # a stalled TTFT (seen once in CI: 8 requests in flight at 1.6 s)
    "tests/integration/test_warmup.py::test_warmup_requests_have_the_runs_sampling_and_their_own_prompts",
    "tests/integration/test_client_cost_guard.py",
    "tests/integration/test_testserver.py::test_timing_ttft_and_itl",
    "tests/integration/test_cli_e2e.py::test_timing_truth",
    "tests/integration/test_shard_merge.py::test_three_shard_processes_merged_equal_the_whole_run",
    "tests/integration/test_sweep_capacity.py::test_the_layout_table_orders_the_configs_and_recommends_the_wider",
    "tests/integration/test_gate_capacity.py::test_real_searches_on_the_test_server_fail_a_quarter_of_the_seats",
    # its boundary is 200 ms of TTFT against a 250 ms SLO: a starved client read 8 in flight as failing (CI, once)
    "tests/integration/test_capacity.py::test_a_concurrency_search_finds_the_queueing_boundary_exactly",
    "tests/integration/test_capacity.py::test_max_duration_stops_and_reports_the_bracket_so_far",  # 2 s of slack
    # 10 ms of TTFT against a 200 ms SLO, 90% within it: a starved client read b's share under 90% (CI, once)
    "tests/integration/test_sweep_recommend.py::test_the_recommendation_is_the_most_good_requests_per_dollar",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.vllm_env import keep_xdist_groups

    tiers.mark_tiers(items)
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
    keep_xdist_groups(config, items)
