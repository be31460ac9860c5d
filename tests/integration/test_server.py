"""evalkit.server (launch, process_group, vllm_process, gpu) without a real vLLM: argv building, launcher choice,
and the whole start/stop lifecycle against evalkit/testing/fake_vllm_process.py (slow starts, crashes, ignored
SIGTERM, grandchildren, signals)."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from evalkit.config import ServerConfig
from evalkit.server import gpu
from evalkit.server.launch import build_argv
from evalkit.server.process_group import group_alive
from evalkit.server.vllm_process import ServerStartError, VLLMServer
from tests.shell_signals import as_from_a_shell

REPO = Path(__file__).resolve().parents[2]
FAKE = str(REPO / "evalkit" / "testing" / "fake_vllm_process.py")


# --------------------------------------------------------------------------------------------- argv
def deepseek_cfg(**kw: object) -> ServerConfig:
    base: dict[str, object] = {
        "model": "deepseek-ai/DeepSeek-V3.2",
        "served_model_name": "deepseek-v3.2",
        "tensor_parallel_size": 2,
        "data_parallel_size": 4,
        "enable_expert_parallel": True,
        "max_num_seqs": 256,
        "gpu_memory_utilization": 0.9,
        "reasoning_parser": "deepseek_v3",
        "tool_call_parser": "deepseek_v32",
        "extra_args": ["--tokenizer-mode=deepseek_v32", "--kv-cache-dtype", "fp8"],
        "env": {"VLLM_USE_DEEP_GEMM": "0"},
        "gpus": "0,1,2,3,4,5,6,7",
    }
    base.update(kw)
    return ServerConfig.model_validate(base)


DEEPSEEK_FLAGS = [
    "--host", "127.0.0.1", "--port", "8000",
    "--served-model-name", "deepseek-v3.2",
    "--tensor-parallel-size", "2",
    "--data-parallel-size", "4",
    "--max-num-seqs", "256",
    "--gpu-memory-utilization", "0.9",
    "--reasoning-parser", "deepseek_v3",
    "--tool-call-parser", "deepseek_v32",
    "--enable-expert-parallel",
    "--tokenizer-mode=deepseek_v32", "--kv-cache-dtype", "fp8",
]  # fmt: skip


def test_build_argv_deepseek_module() -> None:
    argv = build_argv(deepseek_cfg(), 8000, launcher="module")
    assert argv == [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "deepseek-ai/DeepSeek-V3.2",
        *DEEPSEEK_FLAGS,
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------- lifecycle
def fake_cfg(*fake_flags: str, **kw: object) -> ServerConfig:
    base: dict[str, object] = {
        "model": "fake-model",
        "command": [sys.executable, FAKE],
        "extra_args": list(fake_flags),
        "startup_timeout_s": 30,
        "stop_grace_s": 5,
    }
    base.update(kw)
    return ServerConfig.model_validate(base)


def wait_gone(pid: int, timeout: float = 10) -> bool:
    """True once ``pid`` is no live process (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def assert_group_gone(pgid: int) -> None:
    group_alive(pgid)  # reaps adopted zombies, as VLLMServer.stop does
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_ready_provenance_env_and_stop(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    cfg = fake_cfg(
        "--fake-record",
        str(record),
        served_model_name="smol",
        max_num_seqs=4,
        env={"VLLM_USE_DEEP_GEMM": "0", "HF_TOKEN": "hf_secret"},
        gpus="3",
        api_key="sk-test",
    )
    with VLLMServer(cfg, tmp_path / "run", poll_interval_s=0.05) as srv:
        assert srv.pid is not None
        pgid = srv.pid
        assert srv.base_url == f"http://127.0.0.1:{srv.port}"
        status, body = get(srv.base_url + "/v1/models", token="sk-test")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "smol"
        assert srv.startup_s is not None and 0 < srv.startup_s < 30
        seen = json.loads(record.read_text())
        assert seen["env"]["CUDA_VISIBLE_DEVICES"] == "3"
        assert seen["env"]["VLLM_API_KEY"] == "sk-test"  # the real key reaches vLLM...
        assert seen["env"]["VLLM_USE_DEEP_GEMM"] == "0"
        prov = srv.provenance()
        assert "sk-test" not in json.dumps(prov) and "hf_secret" not in json.dumps(prov)  # ...never the records
        assert prov["env_overrides"] == {
            "VLLM_USE_DEEP_GEMM": "0",
            "HF_TOKEN": "***",
            "CUDA_VISIBLE_DEVICES": "3",
            "VLLM_API_KEY": "***",
        }
        assert prov["argv"] == srv.argv and seen["argv"] == srv.argv[1:]  # fake's sys.argv starts at its path
        assert prov["argv"][:2] == [sys.executable, FAKE] and "--max-num-seqs" in prov["argv"]
        assert prov["vllm_version"] == "0.0.0+fake"  # asked from the running server's /version
        assert prov["launcher"] == "module"
        assert prov["startup_s"] == srv.startup_s
        assert "gpus" in prov
    assert_group_gone(pgid)
    assert srv.poll() is not None
    srv.stop()  # idempotent
    log_text = (tmp_path / "run" / "server.log").read_text()
    assert "launching:" in log_text and "Starting vLLM API server" in log_text and "vLLM stopped" in log_text


def test_slow_start_is_waited_for(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with VLLMServer(fake_cfg("--fake-startup-delay", "1.5"), tmp_path, poll_interval_s=0.05) as srv:
        assert time.monotonic() - t0 >= 1.5
        assert srv.startup_s is not None and srv.startup_s >= 1.5
        assert get(srv.base_url + "/health")[0] == 200


def test_startup_failure_one_line_error_and_log_tail(tmp_path: Path) -> None:
    srv = VLLMServer(fake_cfg("--fake-exit-code", "1"), tmp_path, poll_interval_s=0.05)
    with pytest.raises(ServerStartError) as info:
        srv.start()
    msg = str(info.value)
    assert "\n" not in msg
    assert "vLLM exited with code 1 during startup" in msg and "server.log" in msg
    tail = info.value.log_tail.splitlines()
    assert len(tail) == 30 and tail[-1] == "RuntimeError: fake engine core failed to start"
    assert srv.pid is not None
    assert_group_gone(srv.pid)


def test_bad_flag_is_a_startup_error(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="exited with code 2") as info:
        VLLMServer(fake_cfg("--no-such-flag"), tmp_path, poll_interval_s=0.05).start()
    assert "unrecognized arguments: --no-such-flag" in info.value.log_tail


def test_startup_deadline(tmp_path: Path) -> None:
    srv = VLLMServer(fake_cfg("--fake-startup-delay", "60", startup_timeout_s=1), tmp_path, poll_interval_s=0.05)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match=r"not ready within startup_timeout_s=1 s; raise startup_timeout_s"):
        srv.start()
    assert time.monotonic() - t0 < 10
    assert srv.pid is not None
    assert_group_gone(srv.pid)


def test_wrong_model_name_listed(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match=r"lists \['other'\], not 'fake-model'; set served_model_name"):
        VLLMServer(fake_cfg("--fake-models", "other"), tmp_path, poll_interval_s=0.05).start()


def test_sigterm_ignored_escalates_to_sigkill_grandchild_included(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    cfg = fake_cfg(
        "--fake-ignore-sigterm",
        "--fake-child",
        "--fake-child-ignore-sigterm",
        "--fake-record",
        str(record),
        stop_grace_s=1,
    )
    srv = VLLMServer(cfg, tmp_path, poll_interval_s=0.05).start()
    pgid = srv.pid
    assert pgid is not None
    child = json.loads(record.read_text())["child_pid"]
    assert os.getpgid(child) == pgid
    t0 = time.monotonic()
    srv.stop()
    took = time.monotonic() - t0
    assert 1 <= took < 10
    assert srv.poll() == -signal.SIGKILL
    assert wait_gone(child, timeout=0)
    assert_group_gone(pgid)
    assert "sending SIGKILL" in (tmp_path / "server.log").read_text()


def test_grandchild_stopped_with_sigterm(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    srv = VLLMServer(fake_cfg("--fake-child", "--fake-record", str(record)), tmp_path, poll_interval_s=0.05)
    with srv:
        child = json.loads(record.read_text())["child_pid"]
    assert wait_gone(child, timeout=0)
    assert srv.pid is not None
    assert_group_gone(srv.pid)
    assert "SIGKILL" not in (tmp_path / "server.log").read_text()


def test_stop_on_exception_inside_with(tmp_path: Path) -> None:
    pgid = None
    with (
        pytest.raises(ValueError, match="boom"),
        VLLMServer(fake_cfg(), tmp_path, poll_interval_s=0.05) as srv,
    ):
        pgid = srv.pid
        raise ValueError("boom")
    assert pgid is not None
    assert_group_gone(pgid)


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ServerStartError) as info:
            VLLMServer(fake_cfg(port=port), tmp_path).start()
    assert str(info.value).startswith(f"port {port} on 127.0.0.1 is in use")
    assert str(info.value).endswith("pick another --port or leave it unset for a free port")
    assert not (tmp_path / "server.log").exists()  # refused before launching


def test_launch_failure_is_one_line(tmp_path: Path) -> None:
    cfg = ServerConfig(model="m", command=[str(tmp_path / "no-such-vllm")])
    with pytest.raises(ServerStartError, match="could not launch"):
        VLLMServer(cfg, tmp_path).start()


DRIVER = """
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1)  # the stack of a driver that does not exit, for finish()
sys.path.insert(0, {repo!r})
from evalkit.config import ServerConfig
from evalkit.server.vllm_process import VLLMServer
cfg = ServerConfig(
    model="fake-model", command=[sys.executable, {fake!r}], extra_args={extra!r}, stop_grace_s=5
)
srv = VLLMServer(cfg, {run_dir!r}, poll_interval_s=0.05)
if sys.argv[1] == "atexit":
    srv.start()
    print("PGID", srv.pid, flush=True)
    sys.exit(0)  # no stop(): the atexit hook must do it
try:
    with srv:
        print("PGID", srv.pid, flush=True)
        time.sleep(60)
except KeyboardInterrupt as exc:
    print("INTERRUPTED", repr(exc), "alive:", srv.poll() is None, flush=True)
    raise
"""


HANG_S = 90  # a hang guard, not a measure: the longest stop (5 s of grace, SIGKILL, reaping) lasts ~20 s


def finish(proc: subprocess.Popen[str]) -> str:
    """The driver's standard output once it has exited; a driver still running after ``HANG_S`` fails the test
    with its Python stack (faulthandler on SIGUSR1, the driver's standard error) and is killed."""
    try:
        return proc.communicate(timeout=HANG_S)[0]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the driver did not exit within {HANG_S} s; its output:\n{out}\nits stack:\n{err}")


@pytest.mark.parametrize(("mode", "sig"), [("with", signal.SIGTERM), ("with", signal.SIGINT), ("atexit", None)])
def test_signals_and_atexit_stop_the_server(tmp_path: Path, mode: str, sig: signal.Signals | None) -> None:
    script = tmp_path / "driver.py"
    record = tmp_path / "rec.json"
    extra = ["--fake-child", "--fake-record", str(record)]
    script.write_text(DRIVER.format(repo=str(REPO), fake=FAKE, extra=extra, run_dir=str(tmp_path / "run")))
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_shell,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PGID"), line
    pgid = int(line.split()[1])
    child = json.loads(record.read_text())["child_pid"]
    if sig is not None:
        proc.send_signal(sig)
    out = finish(proc)
    if sig is not None:
        assert "INTERRUPTED" in out and "alive: False" in out  # stopped by the time the exception leaves `with`
        assert proc.returncode != 0
    else:
        assert proc.returncode == 0
    assert wait_gone(pgid) and wait_gone(child)
    assert_group_gone(pgid)


def test_sigterm_during_startup(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    record = tmp_path / "rec.json"
    extra = ["--fake-startup-delay", "60", "--fake-record", str(record)]
    script.write_text(DRIVER.format(repo=str(REPO), fake=FAKE, extra=extra, run_dir=str(tmp_path / "run")))
    proc = subprocess.Popen(
        [sys.executable, str(script), "startup"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_shell,
    )
    deadline = time.monotonic() + 20
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    fake_pid = json.loads(record.read_text())["pid"]  # the fake writes its record before its startup delay
    proc.send_signal(signal.SIGTERM)
    out = finish(proc)
    assert "INTERRUPTED" in out and "SIGTERM" in out and "alive: False" in out
    assert wait_gone(fake_pid)
    assert_group_gone(fake_pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_inside_the_launch_stops_the_launched_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, sig: signal.Signals
) -> None:
    """A signal arriving while ``subprocess.Popen`` has started vLLM but not returned: the server is stopped."""
    record = tmp_path / "rec.json"
    real_popen = subprocess.Popen

    def popen_then_signal(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        deadline = time.monotonic() + 20
        while not record.exists() and time.monotonic() < deadline:  # the fake runs and has written its pid
            time.sleep(0.02)
        signal.raise_signal(sig)  # its handler runs here, before Popen would have returned
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    # as in a program started from a shell: a test run a script started in the background ignores SIGINT
    interrupts = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.default_int_handler),)}
    request.addfinalizer(lambda: [signal.signal(s, h) for s, h in interrupts.items()])
    before = signal.getsignal(signal.SIGTERM)
    srv = VLLMServer(fake_cfg("--fake-startup-delay", "60", "--fake-record", str(record)), tmp_path)
    with pytest.raises(KeyboardInterrupt):
        srv.start()
    fake_pid = json.loads(record.read_text())["pid"]
    assert srv.pid == fake_pid and srv.poll() is not None
    assert wait_gone(fake_pid)
    assert_group_gone(fake_pid)
    assert signal.getsignal(signal.SIGTERM) is before  # evalkit's SIGTERM handler is gone with the server


def test_a_sigint_the_process_ignores_stays_ignored_while_stopping(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A run a script started in the background ignores SIGINT: one arriving while the server stops neither
    hurries the stop nor raises KeyboardInterrupt after it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    srv = VLLMServer(fake_cfg("--fake-ignore-sigterm", stop_grace_s=2), tmp_path, poll_interval_s=0.05).start()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # during the 2 s of grace
    t0 = time.monotonic()
    srv.stop()  # no KeyboardInterrupt
    assert time.monotonic() - t0 >= 1.9  # the whole grace was waited (SIGKILL after it: the fake ignores SIGTERM)
    assert "did not stop within stop_grace_s=2 s" in (tmp_path / "server.log").read_text()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


# ---------------------------------------------------------------------------------------------- gpu
FAKE_SMI = """#!{python}
import os, sys
q = [a for a in sys.argv if a.startswith("--query-gpu=")][0].split("=", 1)[1]
n_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "n")
n = int(open(n_file).read()) if os.path.exists(n_file) else 0
open(n_file, "w").write(str(n + 1))
if q == "index,name,memory.total,memory.used,driver_version":
    print("0, NVIDIA H200, 143771, 1024, 570.86.15")
    print("1, NVIDIA H200, 143771, [N/A], 570.86.15")
elif q == "index,memory.used":
    print(f"0, {{1000 + 100 * (n % 3)}}")
    print("1, 5")
"""


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "nvidia-smi"
    path.write_text(FAKE_SMI.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return path


def test_gpu_info_with_fake_nvidia_smi(fake_smi: Path) -> None:
    assert gpu.gpu_info() == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771.0,
            "memory_used_mib": 1024.0,
            "driver_version": "570.86.15",
        },
        {
            "index": 1,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771.0,
            "memory_used_mib": None,
            "driver_version": "570.86.15",
        },
    ]


def test_gpu_sampler_with_fake_nvidia_smi(fake_smi: Path) -> None:
    sampler = gpu.GpuSampler(interval_s=0.01)
    for _ in range(6):
        sampler.sample_once()  # deterministic: used = 1000, 1100, 1200, 1000, 1100, 1200
    summary = sampler.summary()
    assert summary["available"] is True
    assert summary["gpus"] == [
        {"index": 0, "peak_mib": 1200.0, "mean_mib": 1100.0, "samples": 6},
        {"index": 1, "peak_mib": 5.0, "mean_mib": 5.0, "samples": 6},
    ]
    with gpu.GpuSampler(interval_s=0.02) as threaded:
        time.sleep(0.3)
    assert threaded.summary()["gpus"][0]["samples"] >= 2


def test_provenance_reports_gpus(fake_smi: Path, tmp_path: Path) -> None:
    srv = VLLMServer(ServerConfig(model="m"), tmp_path)
    prov = srv.provenance()  # before start: no argv yet, but version and GPUs are known
    assert prov["gpus"][0]["name"] == "NVIDIA H200"
    assert prov["argv"] == [] and prov["base_url"] is None
