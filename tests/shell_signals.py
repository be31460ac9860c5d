"""Children that a test interrupts as a terminal user would (Ctrl-C, ``kill``): started with SIGINT and SIGTERM
delivered and at their default dispositions, whatever the test process inherited. A test run started in the
background by a non-interactive shell (``bash -c 'pytest … &'``, ``nohup … &``) has SIGINT ignored, a child inherits
that, and Python then never raises KeyboardInterrupt in it: the test would wait for an interrupt that cannot come."""

from __future__ import annotations

import signal

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


def as_from_a_shell() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT and SIGTERM unblocked and at their defaults in the child."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_DFL)
