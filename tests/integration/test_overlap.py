"""Fixed costs overlap what they can: prompts are built while evalkit starts vLLM (or, against an endpoint, while the
first requests go out: tests/unit/test_prompt_stream.py), and the scorer loads beside the first requests."""

import time
from pathlib import Path

import pytest

from evalkit.config import load_config
from evalkit.runner import Runner


@pytest.mark.slow
def test_prompts_are_built_while_the_server_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, test_server):
    cache = tmp_path / "cache"
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(cache))  # a cold prompt cache: lm-eval builds the prompts
    seen: dict[str, object] = {}

    def slow_server_start(self: Runner, run_dir: Path | None) -> str:
        # stands in for vLLM loading a model: it returns only once the prompts have been built (or after 60 s)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60 and not list(cache.glob("prompts/gsm8k-*.json")):
            time.sleep(0.05)
        seen["built_during_start"] = bool(list(cache.glob("prompts/gsm8k-*.json")))
        seen["waited_s"] = time.perf_counter() - t0
        return test_server.url

    monkeypatch.setattr(Runner, "_start_server", slow_server_start)
    cfg = load_config(
        {
            "tasks": ["gsm8k"],
            "server": {"model": "test-model"},
            "limit": 5,
            "max_tokens": 16,
            "concurrency": "4",
            "output_dir": tmp_path / "run",
            "report": False,
        }
    )
    out = Runner(cfg).run()
    assert seen["built_during_start"], seen
    t = out.summary.timings_s
    assert t["server_start"] >= seen["waited_s"] - 0.5  # the build's time was spent inside the server start
    assert t["prompts"] < 2.0, t  # and the plan found them ready (lm-eval's build alone takes several seconds)
    counts = out.summary.tasks["gsm8k"].counts
    assert counts["total"] == 5 and counts["api_error"] == 0


def test_timings_account_for_the_command(tmp_path: Path, test_server) -> None:
    cfg = load_config(
        {
            "tasks": ["gsm8k"],
            "endpoint": test_server.url,
            "limit": 8,
            "max_tokens": 16,
            "concurrency": "4",
            "output_dir": tmp_path / "run",
            "report": True,
        }
    )
    t0 = time.perf_counter()
    out = Runner(cfg).run()
    wall = time.perf_counter() - t0
    t = out.summary.timings_s
    phases = [
        "setup",
        "prompts",
        "resume_check",
        "gsm8k.before_requests",
        "gsm8k.requests",
        "gsm8k.scoring_summary",
        "report",
    ]
    phases += [p for p in ("prompt_cache",) if p in t]  # a cold prompt cache: lm-eval's build ran to its end
    assert all(isinstance(t[p], float) and t[p] >= 0 for p in phases), t
    assert abs(sum(t[p] for p in phases) - wall) < 0.25 * wall + 0.1, (t, wall)  # the laps cover the run
    assert t["startup"] is None or t["startup"] > 0  # process age at start (Linux)
    req = out.summary.tasks["gsm8k"].speed.wall_s
    assert t["gsm8k.requests"] >= req  # the request phase lies inside its lap
