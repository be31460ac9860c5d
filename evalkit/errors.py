"""Errors a user can act on. Each carries one line that names the problem and the fix."""

from __future__ import annotations

import sys
from pathlib import Path


class EvalkitError(Exception):
    """A problem with the user's input or environment; the CLI prints it as one line and exits 2."""

    exit_code = 2


class ConfigError(EvalkitError):
    pass


class EndpointError(EvalkitError):
    pass


class ServerError(EvalkitError):
    """evalkit could not start the vLLM server; the message ends with the tail of server.log."""


class TaskError(EvalkitError):
    pass


class DataError(EvalkitError):
    pass


class StoreError(EvalkitError):
    """The run dir could not be written (disk full, I/O error) or read back; what it held before is kept."""


class RunError(EvalkitError):
    """The run finished but did not meet its bar (e.g. error rate); everything computed was written, in
    ``run_dir`` when it is known."""

    exit_code = 1

    def __init__(self, message: str, run_dir: Path | None = None) -> None:
        super().__init__(message)
        self.run_dir = run_dir


def warn(message: str) -> None:
    """One line on stderr, ``evalkit: warning: MESSAGE``: something the user should know, not a reason to stop."""
    print(f"evalkit: warning: {message}", file=sys.stderr, flush=True)
