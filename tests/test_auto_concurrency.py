"""--concurrency auto finds the server's capacity: it grows while the server has free slots and stops once
the server queues requests."""

import pytest

from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.testing.server import Behaviour, TestServer


@pytest.mark.slow
def test_auto_grows_to_server_capacity_and_stops_there(tmp_path):
    # the server generates at most 48 requests at once; each takes ~0.7 s (64 tokens at 10 ms)
    with TestServer(Behaviour(ttft_s=0.05, itl_s=0.01, max_num_seqs=48)) as srv:
        cfg = load_config({"tasks": ["gsm8k"], "endpoint": srv.url, "limit": 600, "max_tokens": 64,
                           "output_dir": tmp_path / "auto", "report": False})
        out = Runner(cfg).run()
        seen = srv.max_concurrency_seen
    t = out["summary"]["tasks"]["gsm8k"]
    used = t["speed"]["concurrency"]
    assert used >= 48, t["concurrency_trace"]  # reached the server's capacity (started below it)
    assert used <= 128, t["concurrency_trace"]  # and stopped once the server queued requests
    assert seen >= 48
    assert t["concurrency_trace"][0][1] < 48  # it did have to grow
    print(t["concurrency_trace"])


def test_fixed_concurrency_is_respected(tmp_path):
    with TestServer(Behaviour(ttft_s=0.02, itl_s=0.002)) as srv:
        cfg = load_config({"tasks": ["gsm8k"], "endpoint": srv.url, "limit": 40, "concurrency": "3",
                           "max_tokens": 32, "output_dir": tmp_path / "fixed", "report": False})
        out = Runner(cfg).run()
        assert srv.max_concurrency_seen == 3
    assert out["summary"]["tasks"]["gsm8k"]["speed"]["concurrency"] == 3
