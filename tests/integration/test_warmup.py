"""The warm-up before the timed phase (evalkit/client/warmup.py): against the test server's first-batch stall
(the first request of each new sampling config holds every request in flight, as vLLM compiling its top-k/top-p
kernel), the default warm-up takes the stall out of the run's speed figures; warm-up requests use the run's
sampling settings with their own distinct prompts, are never scored or stored as samples, are recorded in the
manifest and summary, come before the server's /metrics "before" snapshot, and can be sized or turned off."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.client import warmup
from evalkit.config import load_config
from evalkit.runner import Runner
from evalkit.sweep import load_spec, plan
from evalkit.testing.server import Behaviour, SubprocessServer, TestServer

TTFT_S = 0.5  # injected time to first token (client and server overheads on loaded cores: 10-50 ms)
STALL_S = 2.0  # the first batch of a new sampling config
# aime25 (temperature 1.0, top_p 0.95): all 30 problems x 8 samples, 8 at a time (240 requests, so that the p99
# is not one request's hiccup on 2 loaded cores)
RUN = ["aime25", "--limit", "30", "--num-samples", "8", "--max-tokens", "16", "--concurrency", "8"]
REQUESTS = 240


def evalkit(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def read(out: Path) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return manifest, summary, samples


def stalled_run(out: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]], int]:
    """The run against a test server in a process of its own (so that its work does not share the client's GIL
    and cores' timing), with the first-batch stall; also how many requests (warm-up ones apart) it received."""
    args = ("--ttft", str(TTFT_S), "--first-batch-stall", str(STALL_S))
    with SubprocessServer(*args) as srv:
        code, err = evalkit("run", *RUN, "--endpoint", srv.url, "-o", str(out), "-q", "--no-report", *extra)
        assert code == 0, err
        with urllib.request.urlopen(srv.base_url + "/_test/requests") as resp:
            received = len(json.loads(resp.read()))
    return (*read(out), received)


@pytest.mark.slow
def test_default_warmup_takes_the_first_batch_stall_out_of_ttft(tmp_path: Path) -> None:
    cold_manifest, cold, cold_samples, _ = stalled_run(tmp_path / "cold", "--no-warmup")
    manifest, warm, samples, received = stalled_run(tmp_path / "warm")
    cold_p99 = cold["tasks"]["aime25"]["speed"]["ttft_ms"]["p99"]
    warm_p99 = warm["tasks"]["aime25"]["speed"]["ttft_ms"]["p99"]
    print(f"TTFT p99: {cold_p99:.1f} ms without warm-up, {warm_p99:.1f} ms with it (injected {TTFT_S * 1000:g} ms)")
    assert cold_p99 > (TTFT_S + STALL_S / 2) * 1000  # without a warm-up the stall is taken as speed
    assert abs(warm_p99 - TTFT_S * 1000) <= 0.15 * TTFT_S * 1000

    # one line of samples.jsonl per sample, with or without a warm-up; --no-warmup leaves no trace in the files
    assert len(samples) == len(cold_samples) == received == REQUESTS
    assert "warmup" not in cold_manifest and "warmup" not in cold
    assert warm["warmup"] == {"requests": 8, "failed": 0, "wall_s": warm["warmup"]["wall_s"]}
    assert warm["warmup"]["wall_s"] >= STALL_S * 0.9
    assert "aime25.warmup" in warm["timings_s"]
    assert manifest["warmup"] == {
        "requests": None,
        "max_tokens": warmup.MAX_TOKENS,
        "prompts_sha256": warmup.text_sha256(),
        "configs": [
            {
                "task": "aime25",
                "endpoint_kind": "chat",
                "temperature": 1.0,
                "top_p": 0.95,
                "seeded": False,
                "requests": 8,
                "concurrency": 8,
                "max_tokens": 16,
            }
        ],
    }
    # the server's /metrics delta is the timed phase's: the "before" snapshot is taken after the warm-up
    assert warm["tasks"]["aime25"]["server"]["requests"]["total"] == REQUESTS


def test_warmup_requests_have_the_runs_sampling_and_their_own_prompts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # a stall far above what a loaded machine adds to the 50 ms TTFT (the client shares this process's GIL with the
    # test server: 240 requests saw up to ~300 ms there), so that a timed request that met it stands out
    with TestServer(Behaviour(ttft_s=0.05, first_batch_stall_s=1.5)) as srv:
        code, err = evalkit("run", *RUN, "--endpoint", srv.url, "-o", str(out), "-q", "--no-report")
        assert code == 0, err
        sent, timed = srv.warmup_requests, srv.requests
    samples = read(out)[2]
    assert len(sent) == 8 and len(timed) == len(samples) == REQUESTS
    assert {(r.body["temperature"], r.body["top_p"], r.body["max_tokens"]) for r in sent} == {(1.0, 0.95, 16)}
    assert all(r.headers.get(warmup.WARMUP_HEADER) == "1" for r in sent)
    assert not any(warmup.WARMUP_HEADER in r.headers for r in timed)
    warm_prompts = [r.prompt for r in sent]
    assert len(set(warm_prompts)) == 8  # distinct prompts, none of the eval's
    assert not set(warm_prompts) & ({r.prompt for r in timed} | {s["prompt"] for s in samples})
    assert max(r.end_time or 0 for r in sent) <= min(r.time for r in timed)  # all before the timed phase
    assert all(s["ttft_ms"] < 1000 for s in samples)  # the stall fell on the warm-up


def test_every_sampling_config_is_warmed(tmp_path: Path) -> None:
    """Two tasks of different sampling (gsm8k greedy and seeded, streamed from lm-eval; aime25 at T=1.0): each
    config gets its warm-up, with its own settings, before its task's timed phase."""
    out = tmp_path / "run"
    with TestServer(Behaviour(ttft_s=0.05, first_batch_stall_s=1.0)) as srv:
        code, err = evalkit(
            "run", "gsm8k", "aime25", "--endpoint", srv.url, "--limit", "3", "--num-samples", "1",
            "--max-tokens", "8", "--concurrency", "2", "-o", str(out), "-q", "--no-report",
        )  # fmt: skip
        assert code == 0, err
    manifest, summary, samples = read(out)
    assert len(samples) == 6
    configs = {(c["task"], c["endpoint_kind"], c["temperature"], c["top_p"], c["seeded"], c["requests"]) for c in
               manifest["warmup"]["configs"]}  # fmt: skip
    assert configs == {("gsm8k", "completions", 0.0, None, True, 2), ("aime25", "chat", 1.0, 0.95, False, 2)}
    kinds = {(r.path, r.body["temperature"], r.body.get("top_p")) for r in srv.warmup_requests}
    assert kinds == {("/v1/completions", 0.0, None), ("/v1/chat/completions", 1.0, 0.95)}
    assert summary["warmup"]["requests"] == 4 and summary["warmup"]["failed"] == 0
    assert all(s["ttft_ms"] < 1000 for s in samples)  # no timed request waited for a stall


def test_warmup_count_config_and_off(tmp_path: Path) -> None:
    with TestServer(Behaviour(ttft_s=0.2)) as srv:
        args = ["run", "aime25", "--endpoint", srv.url, "--limit", "2", "--num-samples", "1", "--max-tokens", "8"]
        code, err = evalkit(*args, "--concurrency", "2", "--warmup", "5", "-o", str(tmp_path / "a"), "-q")
        assert code == 0, err
        assert len(srv.warmup_requests) == 5 and srv.max_concurrency_seen == 2
        assert read(tmp_path / "a")[0]["warmup"]["requests"] == 5
        code, err = evalkit(*args, "--warmup", "2", "--no-warmup", "-o", str(tmp_path / "b"), "-q")
        assert code == 2 and "either --warmup 2 or --no-warmup" in err and "Traceback" not in err
    assert load_config({"tasks": ["x"], "warmup": False}).warmup == 0
    assert load_config({"tasks": ["x"], "warmup": True}).warmup is None
    assert load_config({"tasks": ["x"], "warmup": "off"}).warmup == 0


def test_env_turns_warmup_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_WARMUP", "0")
    with TestServer() as srv:
        code, err = evalkit(
            "run", "aime25", "--endpoint", srv.url, "--limit", "2", "--num-samples", "1", "--max-tokens", "8",
            "-o", str(tmp_path / "run"), "-q", "--no-report",
        )  # fmt: skip
        assert code == 0, err
        assert srv.warmup_requests == []
    manifest, summary, _ = read(tmp_path / "run")
    assert "warmup" not in manifest and "warmup" not in summary


class _Started:
    """Stands for a server evalkit started (what the Runner reads of one), serving at ``base_url``."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def provenance(self) -> dict[str, Any]:
        return {"stand_in": True}


@pytest.mark.parametrize("dev_mode", [True, False])
def test_prefix_cache_reset_after_warmup_on_a_server_evalkit_started(tmp_path: Path, dev_mode: bool) -> None:
    with TestServer(Behaviour(dev_mode=dev_mode)) as srv:
        cfg = load_config(
            {"tasks": ["aime25"], "endpoint": srv.url, "limit": 2, "num_samples": 1, "max_tokens": 8,
             "output_dir": tmp_path / "run", "report": False}
        )  # fmt: skip
        Runner(cfg, server=_Started(srv.base_url)).run()
        resets = srv.state.prefix_cache_resets
    summary = read(tmp_path / "run")[1]["warmup"]
    assert resets == (1 if dev_mode else 0)
    assert summary["prefix_cache_reset"] is dev_mode
    if not dev_mode:
        assert "VLLM_SERVER_DEV_MODE=1" in summary["prefix_cache_note"]


def test_no_prefix_cache_reset_on_a_server_evalkit_did_not_start(tmp_path: Path) -> None:
    with TestServer(Behaviour(dev_mode=True)) as srv:
        code, err = evalkit(
            "run", "aime25", "--endpoint", srv.url, "--limit", "2", "--num-samples", "1", "--max-tokens", "8",
            "-o", str(tmp_path / "run"), "-q", "--no-report",
        )  # fmt: skip
        assert code == 0, err
        assert srv.state.prefix_cache_resets == 0
    assert "prefix_cache_reset" not in read(tmp_path / "run")[1]["warmup"]


def test_resumed_run_with_nothing_left_sends_no_warmup_and_keeps_the_warmup_record(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "aime25", "--limit", "2", "--num-samples", "1", "--max-tokens", "8", "-o", str(out), "-q"]
    with TestServer() as srv:
        assert evalkit(*args, "--endpoint", srv.url)[0] == 0
        first_manifest, first, _ = read(out)
        srv.reset()
        assert evalkit(*args, "--endpoint", srv.url)[0] == 0
        assert srv.warmup_requests == [] and srv.requests == []
    manifest, summary, samples = read(out)
    assert len(samples) == 2
    # the samples' speed was measured after the first run's warm-up: the resumed run keeps its record
    assert first["warmup"]["requests"] == 2 and "aime25.warmup" in first["timings_s"]
    assert summary["warmup"] == first["warmup"]
    assert summary["timings_s"]["aime25.warmup"] == first["timings_s"]["aime25.warmup"]
    assert manifest["warmup"] == first_manifest["warmup"] and len(manifest["warmup"]["configs"]) == 1


def test_sweep_passes_warmup_and_each_run_warms_its_sampling_point(tmp_path: Path) -> None:
    spec_file = tmp_path / "sweep.yaml"
    spec_file.write_text(
        "tasks: [aime25]\nlimit: 2\nendpoint: http://127.0.0.1:9/v1\nwarmup: 3\n"
        "sampling:\n  greedy: {temperature: 0, num_samples: 1, max_tokens: 8}\n"
        "  t1: {temperature: 1.0, top_p: 0.95, num_samples: 1, max_tokens: 8}\n"
    )
    combos = plan(load_spec(spec_file))
    assert [c.settings["warmup"] for c in combos] == [3, 3]
    with TestServer() as srv:
        spec_file.write_text(spec_file.read_text().replace("http://127.0.0.1:9/v1", srv.url))
        code, err = evalkit("sweep", str(spec_file), "-o", str(tmp_path / "sw"))
        assert code == 0, err
        temps = sorted((r.body["temperature"], r.body.get("top_p")) for r in srv.warmup_requests)
    assert temps == [(0.0, 0.95)] * 3 + [(1.0, 0.95)] * 3  # greedy keeps aime25's default top_p


PROBE = """
import threading, time
THREAD = threading.current_thread().name
time.sleep(0.2)  # an import that takes a while: it must still end before the first timed request
DONE = time.time()
"""


@pytest.mark.parametrize("warmup_arg", [None, "0"])
def test_after_run_imports_load_during_the_warmup_and_end_before_the_timed_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warmup_arg: str | None
) -> None:
    """The modules a caller needs after the run (``evalkit run``: the history's writer) are imported in a thread
    while the warm-up waits on the server, joined before the first timed request; with no warm-up, not at all."""
    name = f"evalkit_probe_{warmup_arg or 'default'}"
    (tmp_path / f"{name}.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    settings = {"tasks": ["aime25"], "limit": 2, "num_samples": 1, "max_tokens": 8, "concurrency": 2, "report": False}
    with TestServer(Behaviour(ttft_s=0.05)) as srv:
        warm = {} if warmup_arg is None else {"warmup": int(warmup_arg)}
        cfg = load_config({**settings, **warm, "endpoint": srv.url, "output_dir": str(tmp_path / "run")})
        Runner(cfg, after_run_imports=[name, "evalkit_no_such_module"]).run()
        timed = srv.requests
    if warmup_arg == "0":
        assert name not in sys.modules  # left to the caller's own import, after the run
        return
    probe = sys.modules[name]
    assert probe.THREAD == "warmup-imports"
    assert min(r.time for r in timed) >= probe.DONE  # joined before the timed phase began
