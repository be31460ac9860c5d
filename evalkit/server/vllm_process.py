"""Run a vLLM OpenAI-compatible server for one run (the ``server`` box of the pipeline): launch it, wait for it,
stop it, and record what ran.

    >>> cfg = ServerConfig(model="models/smollm2-135m", served_model_name="smollm2-135m", enforce_eager=True)
    >>> with VLLMServer(cfg, run_dir=Path("reports/run1")) as server:   # doctest: +SKIP
    ...     print(server.base_url)            # http://127.0.0.1:<free port>
    ...     manifest["server"] = server.provenance()

The config is :class:`~evalkit.config.server_config.ServerConfig` (checked when it is validated), the command and
environment come from :mod:`evalkit.server.launch`. The server runs in its own process group and session
(:mod:`evalkit.server.process_group`); its output goes to ``run_dir/server.log``. ``start()`` returns once
``/health`` is 200 and ``/v1/models`` lists the model. ``stop()`` runs on leaving the ``with`` block, on
exceptions, on Ctrl-C, on SIGTERM sent to evalkit and at interpreter exit; it sends SIGTERM to the whole group,
waits ``stop_grace_s``, then SIGKILLs what is left. This module knows nothing about tasks.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evalkit.config.server_config import ServerConfig, layout_warnings
from evalkit.errors import warn
from evalkit.redact import redact_argv, redact_env
from evalkit.server.gpu import gpu_info
from evalkit.server.http_reads import http_get
from evalkit.server.launch import (
    Launcher,
    build_argv,
    cpu_flags,
    installed_vllm_version,
    is_cpu_build,
    launch_env,
    resolve_launcher,
    with_cpu_dtype,
)
from evalkit.server.process_group import become_subreaper, group_alive

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 30
EVALKIT_NOTE = "[evalkit "  # prefix of the lines evalkit itself writes into server.log


class ServerStartError(RuntimeError):
    """vLLM did not come up.

    ``str()`` is one line (reason and fix); ``log_tail`` holds the last lines of server.log."""

    def __init__(self, message: str, log_tail: str = "", log_path: Path | None = None):
        super().__init__(" ".join(message.split()))
        self.log_tail = log_tail
        self.log_path = log_path


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
        self.dtype_note: str | None = None  # the dtype evalkit chose for the CPU build of vLLM, and why

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
        """Environment given to vLLM on top of evalkit's own (not redacted: use :func:`redact_env`), as
        :func:`~evalkit.server.launch.launch_env` builds it."""
        return launch_env(self.cfg, os.environ)

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
        for line in layout_warnings(self.cfg):
            warn(line)
        self.cfg, self.dtype_note = with_cpu_dtype(self.cfg, cpu_flags(), is_cpu_build(self.cfg.python))
        cfg = self.cfg
        self.launcher = resolve_launcher(cfg)
        if cfg.port is None:
            self.port = free_port(cfg.host)
        else:
            check_port_free(cfg.host, cfg.port)
            self.port = cfg.port
        self.argv = build_argv(cfg, self.port, self.launcher)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        become_subreaper()
        t0 = time.monotonic()
        self._install_sigterm()  # before launching: no window where SIGTERM kills evalkit but not vLLM
        try:
            got: list[int] = []
            with self._deferred_signals(got, hurry=False):  # an interrupt inside Popen would lose the process
                self._launch()
            atexit.register(self.stop)
            for sig in got:
                signal.raise_signal(sig)  # now that stop() knows the process: handled as it would have been
            self._wait_ready(t0)
        except _NotReady as exc:
            self.stop()
            raise ServerStartError(str(exc), self.log_tail(), self.log_path) from None
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        log.info("vLLM ready at %s after %.1f s", self.base_url, self.startup_s)
        if self.dtype_note is not None:  # said once it serves: a failed start's error stays the first line
            print(f"evalkit: {self.dtype_note}", file=sys.stderr, flush=True)
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
            self._restore_sigterm()  # the launch failed: there is nothing to stop
            return
        self._stopped = True
        got: list[int] = []
        try:
            with self._deferred_signals(got, hurry=True):
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
    def _deferred_signals(self, got: list[int], hurry: bool) -> Iterator[None]:
        """SIGINT/SIGTERM collected in ``got`` for the caller to raise after the block; while stopping
        (``hurry``) they also cut the grace period short. A signal this process ignores (SIGINT in a job a script
        started in the background) stays ignored."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def collect(signum: int, frame: object) -> None:
            got.append(signum)
            if hurry:
                self._hurry.set()

        handled = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not signal.SIG_IGN]
        previous = {s: signal.signal(s, collect) for s in handled}
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
            self._version = installed_vllm_version(self.cfg.python)
        return self._version

    def provenance(self) -> dict[str, Any]:
        """What to record in the run manifest: version, exact argv, launcher, env overrides (secrets
        redacted), startup time, the machine's GPUs, the ``max_num_seqs`` it was given and the dtype asked for
        (``dtype_choice``: why, where evalkit chose it for the CPU build)."""
        return {
            "max_num_seqs": self.cfg.max_num_seqs,
            "dtype": self.cfg.dtype,
            "dtype_choice": self.dtype_note,
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
