"""Alembic's environment for evalkit's history: migrations run on the connection evalkit passes
(:func:`evalkit.history.db.upgrade`), never on a URL of their own."""

from __future__ import annotations

from alembic import context

from evalkit.history.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("evalkit's history migrations run through evalkit.history.db.upgrade (a connection)")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
