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
