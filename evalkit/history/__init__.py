"""The run history: every run, gate verdict and watch tick in a database (SQLite under the user's data dir by
default, any SQLAlchemy URL through ``EVALKIT_HISTORY_URL``, ``off`` to turn it off), queryable across releases.

The commands feed it once they have finished (:func:`record_run` after ``evalkit run`` and each ``evalkit sweep``
combination, :func:`record_gate` after ``evalkit gate`` decides, :func:`record_tick` after each ``evalkit watch``
tick). These never raise: a write that fails is one warning line and the command's result stands. Run dirs stay
the source of the samples; the history points at them (``runs.run_dir``). Reference: docs/history.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.errors import warn

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from evalkit.gating.result import GateResult

__all__ = ["record_gate", "record_run", "record_tick", "session", "writer_modules"]


def writer_modules() -> tuple[str, ...]:
    """The modules :func:`record_run` imports (SQLAlchemy's ORM among them: 0.2-0.4 s), for a caller to import
    ahead, while it waits on something else; none when the history is off."""
    from evalkit.history.location import history_url

    return () if history_url() is None else ("evalkit.history.db", "evalkit.history.record")


@contextmanager
def session(url: str | None = None) -> Iterator[Session]:
    """A session on the history (``url``, default :func:`~evalkit.history.location.history_url`) in one transaction,
    committed at the end; HistoryError (one line, URL redacted) when the history is off or cannot be opened."""
    from sqlalchemy.orm import Session

    from evalkit.history.db import HistoryError, open_engine
    from evalkit.history.location import ENV, history_url

    url = url or history_url()
    if url is None:
        raise HistoryError(f"the run history is off ({ENV}=off); set {ENV} to a database URL or unset it")
    with Session(open_engine(url)) as s, s.begin():
        yield s


def _quietly(what: str, write: Any) -> Any:
    """Run ``write(session)`` on the history unless it is off; a failure is one warning line, never raised."""
    from evalkit.history.location import history_url

    url = history_url()
    if url is None:  # nothing of SQLAlchemy is imported for a history that is off
        return None
    try:
        with session(url) as s:
            return write(s)
    except Exception as e:
        from evalkit.history.db import safe_message

        warn(f"{what} was not recorded in the run history ({safe_message(e, url)}); the result stands")
        return None


def record_run(run_dir: Path, *, source: str = "run", config: str | None = None) -> int | None:
    """Record the run in ``run_dir`` (``source``: run, sweep, watch; ``config``: its config's name, else its
    config hash names it); its id, or None when the history is off or the write failed (warned)."""

    def write(s: Session) -> int:
        from evalkit.history.record import add_run_retrying

        return add_run_retrying(s, Path(run_dir), source, config).id

    return _quietly(f"the run {run_dir}", write)


def record_run_told(run_dir: str | Path) -> str:
    """:func:`record_run` for a caller in another process: the warning it would print (a failed write), returned
    instead, for the caller to print where its user sees it; empty when recorded or the history is off."""
    import contextlib
    import io

    told = io.StringIO()
    with contextlib.redirect_stderr(told):
        record_run(Path(run_dir))
    return told.getvalue()


def record_gate(
    result: GateResult, baselines: Sequence[Path], candidates: Sequence[Path], out_dir: Path | None = None
) -> int | None:
    """Record a gate decision over these run dirs; its id, or None (history off, or the write failed: warned)."""

    def write(s: Session) -> int:
        from evalkit.history.record import add_gate

        return add_gate(s, result, baselines, candidates, out_dir).id

    return _quietly("the gate's verdict", write)


def record_tick(watch_dir: Path, task: str, tick: dict[str, Any], run_dir: Path | None) -> int | None:
    """Record one watch tick (the watch's history line as a mapping) and its run dir; its id, or None."""

    def write(s: Session) -> int:
        from evalkit.history.record import add_tick

        return add_tick(s, watch_dir, task, tick, run_dir).id

    return _quietly(f"watch tick {tick.get('tick')}", write)
