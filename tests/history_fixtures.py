"""The run history's test databases: a SQLite file, and a fresh database on the PostgreSQL server that .ci/run
starts (``EVALKIT_TEST_POSTGRES_URL``; the PostgreSQL tests skip, saying so, when it is not set)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from evalkit.history import db

PG_ENV = "EVALKIT_TEST_POSTGRES_URL"
PG_SKIP = f"no PostgreSQL server: set {PG_ENV}=postgresql://USER@HOST:PORT/DB (.ci/run starts one)"


def forget(url: str) -> None:
    """Close this process's engine on ``url`` (so that its database can be dropped)."""
    engine = db._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


def _admin(url: str) -> sa.Engine:
    return sa.create_engine(make_url(url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'history.sqlite'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A history database URL of each backend, empty, dropped afterwards."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path)
        yield url
        forget(url)
        return
    server = os.environ.get(PG_ENV)
    if not server:
        pytest.skip(PG_SKIP)
    name = f"evalkit_test_{uuid.uuid4().hex[:12]}"
    admin = _admin(server)
    with admin.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        forget(url)
        with admin.connect() as c:
            c.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
