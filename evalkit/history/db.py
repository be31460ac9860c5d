"""How the run history is opened: :func:`open_engine` (an engine, for the URL that
:func:`evalkit.history.location.history_url` names, whose schema is upgraded to the newest Alembic migration
first) and :func:`shown_url` (the URL with its password redacted, the only form of it evalkit prints)."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

from evalkit.errors import EvalkitError
from evalkit.history.location import ENV
from evalkit.redact import db_url_userinfo, redact_db_url, redact_text, redact_url

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0003"  # the newest migration (tests/unit/test_history.py checks it against Alembic's): checked without Alembic
BUSY_TIMEOUT_S = 10.0  # how long a SQLite writer waits for another one's lock before giving up
CONNECT_TIMEOUT_S = 5  # a server that does not answer in this long: the write is skipped with a warning
_engines: dict[str, Engine] = {}  # URL -> its engine, its schema at the newest migration (one per process)


class HistoryError(EvalkitError):
    """The history database could not be opened, upgraded, read or written (its URL redacted in the message)."""


def shown_url(url: str) -> str:
    """``url`` as evalkit prints it: user and password replaced by ``***``, whatever the URL's shape, parsed or
    not (:func:`evalkit.redact.redact_db_url`)."""
    return redact_db_url(url)


def safe_message(err: BaseException, url: str | None) -> str:
    """``err`` as one line with the URL's password (and any credentials quoted in it) redacted."""
    secrets: list[str] = []
    if url:
        userinfo = db_url_userinfo(url)
        secrets += [userinfo, userinfo.partition(":")[2], userinfo.strip()]
        with contextlib.suppress(Exception):
            parsed = make_url(url)
            if parsed.password:
                secrets.append(str(parsed.password))
    text = " ".join(str(err).split()).split(" (Background on this error")[0] or type(err).__name__
    return redact_url(redact_text(text, secrets))[:400]


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except Exception:
        raise HistoryError(
            f"{ENV}={shown_url(url)} is not a database URL; set it to sqlite:///PATH, postgresql://USER@HOST/DB or off"
        ) from None
    parsed = parsed.set(drivername=parsed.drivername.lower())  # a URL's scheme is case-insensitive (RFC 3986)
    if parsed.drivername in ("postgresql", "postgres"):  # the psycopg 3 driver (psycopg[binary] from PyPI)
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_folder(url: str, database: str) -> None:
    """Make the folder of a SQLite history file; HistoryError (one line) when it cannot be made."""
    folder = Path(database).expanduser().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HistoryError(
            f"cannot make the folder {folder} of the history database {shown_url(url)} ({e.strerror or e}); "
            f"set {ENV} to sqlite:///PATH in a writable folder, or off"
        ) from None


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (no schema check): SQLite with a busy timeout and WAL journal (writers from several
    processes wait for each other), a server with a connect timeout."""
    parsed = _parse(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _sqlite_folder(url, parsed.database)
        # the driver's own transaction handling off: each transaction is BEGIN IMMEDIATE (below), so a writer
        # takes the write lock at its start and another one waits for it (busy timeout), never a "database is
        # locked" halfway through a transaction that read first
        engine = sa.create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S, "isolation_level": None})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    args = {"connect_timeout": CONNECT_TIMEOUT_S} if parsed.get_backend_name() == "postgresql" else {}
    try:
        return sa.create_engine(parsed, connect_args=args, pool_pre_ping=True)
    except sa.exc.NoSuchModuleError:
        raise HistoryError(
            f"{ENV}={shown_url(url)}: no database of kind {parsed.drivername!r}; "
            "set it to sqlite:///PATH, postgresql://USER@HOST/DB or off"
        ) from None
    except ImportError as e:
        raise HistoryError(
            f"no driver for {shown_url(url)} ({e}); install it (PostgreSQL: pip install 'psycopg[binary]')"
        ) from None


@contextlib.contextmanager
def _migration_lock(engine: Engine, conn: sa.Connection) -> Iterator[None]:
    """Only one process upgrades a schema at a time: a lock file beside a SQLite file, an advisory lock on a
    PostgreSQL server (held until the migration's transaction ends)."""
    if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
        with open(f"{engine.url.database}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield
        return
    if engine.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(31131)"))
    yield


def alembic_config(conn: sa.Connection | None = None) -> Config:
    """The Alembic config of evalkit's migrations (``evalkit/history/migrations``), bound to ``conn``."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at (None: a new database, no table yet)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (default the newest) with Alembic; nothing to do when it is there."""
    if revision == "head" and current_revision(engine) == HEAD:
        return
    from alembic import command

    with engine.begin() as conn, _migration_lock(engine, conn):
        command.upgrade(alembic_config(conn), revision)


def _locked(exc: BaseException) -> bool:
    """A SQLite "database is locked": another process holds the file (switching it to WAL, migrating it) longer
    than the busy timeout lets this one wait, or in a state SQLite does not wait on (the journal mode switch)."""
    return isinstance(exc, sa.exc.OperationalError) and "database is locked" in str(exc)


def _upgrade_waiting(engine: Engine) -> None:
    """:func:`upgrade`, tried again while a SQLite file is locked by another writer opening it (up to
    ``BUSY_TIMEOUT_S`` × 3 in all)."""
    from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

    for attempt in Retrying(
        retry=retry_if_exception(_locked),
        stop=stop_after_delay(BUSY_TIMEOUT_S * 3),
        wait=wait_random_exponential(multiplier=0.05, max=1.0),
        reraise=True,
    ):
        with attempt:
            upgrade(engine)


def open_engine(url: str) -> Engine:
    """An engine on ``url`` whose schema is at the newest migration (made and upgraded once per process and URL)."""
    if url in _engines:
        return _engines[url]
    try:
        engine = make_engine(url)
    except HistoryError:
        raise
    except Exception as e:  # anything else SQLAlchemy or a driver refuses the URL with: one line, never a traceback
        raise HistoryError(
            f"cannot open the history database {shown_url(url)}: {safe_message(e, url)}; check {ENV}"
        ) from None
    try:
        _upgrade_waiting(engine)
    except HistoryError:
        raise
    except Exception as e:
        engine.dispose()
        raise HistoryError(
            f"cannot open the history database {shown_url(url)}: {safe_message(e, url)}; check {ENV}"
        ) from None
    _engines[url] = engine
    return engine
