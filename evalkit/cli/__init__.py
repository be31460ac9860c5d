"""The ``evalkit`` command: thin Typer commands over library functions, one module per command (group).

The command modules are imported for their registration on :data:`app`, in the order ``evalkit --help`` lists
them; each defers its heavy imports into the command's body (``evalkit --version`` answers at once)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

import typer

from evalkit.cli.common import app

# Each module registers its commands on app when imported, and evalkit --help lists them in that order (the
# command groups tasks, watch, config come after them, in the order common.py adds them).
# isort: off
from evalkit.cli import run, capacity, merge, report, schema, gate, sweep, tasks, watch, history, config  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """The ``evalkit`` command (the console script and ``python -m evalkit.cli``); see :func:`_exit_now` for how
    the process ends."""
    try:
        _main()
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            _exit_now(e.code or 0)
        raise


def _exit_now(code: int) -> None:
    """End the process with ``code`` once the command is done, skipping the interpreter's teardown of every module
    and object (0.1-0.25 s after a run): the exit handlers run (a server evalkit started is stopped, logs are
    flushed) and stdout and stderr are flushed first. While a non-daemon thread still runs, the process exits
    as usual (that thread is waited for)."""
    if any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more can be said there
            stream.flush()
    os._exit(code)


def _main() -> None:
    from evalkit.api import offline_environment

    offline_environment(sys.argv[1:])  # an lm-eval:NAME task among the arguments: lm-eval loads its data as usual
    try:
        rc = app(standalone_mode=False)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except typer.TyperException as e:  # click's errors (typer vendors click): bad flags, values, commands
        show = getattr(e, "show", None)
        if type(e).__name__ == "NoArgsIsHelpError" and show is not None:
            show()  # no arguments: the help text
        else:  # bad input like any other: one line (not the boxed usage text)
            ctx = getattr(e, "ctx", None)
            hint = f"; see {ctx.command_path} --help" if ctx is not None else ""
            typer.echo(f"evalkit: error: {' '.join(e.format_message().split()).rstrip('.')}{hint}", err=True)
        sys.exit(e.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)
