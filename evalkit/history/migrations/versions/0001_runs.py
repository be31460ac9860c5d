"""Runs: one row per run dir with its identity, its tasks, their metrics (with CIs) and speed figures.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_dir", sa.String(1024), nullable=False, unique=True),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=True, index=True),
        sa.Column("finished_at", sa.DateTime, nullable=True),
        sa.Column("recorded_at", sa.DateTime, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("model", sa.String(255), nullable=True, index=True),
        sa.Column("config", sa.String(255), nullable=True, index=True),
        sa.Column("config_hash", sa.String(64), nullable=True, index=True),
        sa.Column("server_argv", sa.JSON, nullable=True),
        sa.Column("server_env", sa.JSON, nullable=True),
        sa.Column("vllm_version", sa.String(64), nullable=True),
        sa.Column("evalkit_version", sa.String(64), nullable=True),
        sa.Column("endpoint", sa.String(1024), nullable=True),
        sa.Column("concurrency", sa.String(16), nullable=True),
        sa.Column("versions", sa.JSON, nullable=True),
    )
    op.create_table(
        "run_tasks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("task", sa.String(255), nullable=False, index=True),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("data_sha256", sa.JSON, nullable=True),
        sa.Column("settings", sa.JSON, nullable=True),
        sa.Column("temperature", sa.Float, nullable=True),
        sa.Column("top_p", sa.Float, nullable=True),
        sa.Column("seed", sa.Integer, nullable=True),
        sa.Column("max_tokens", sa.Integer, nullable=True),
        sa.Column("num_samples", sa.Integer, nullable=True),
        sa.Column("requests", sa.Integer, nullable=True),
        sa.Column("counts", sa.JSON, nullable=True),
        sa.UniqueConstraint("run_id", "task"),
    )
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_task_id", sa.Integer, sa.ForeignKey("run_tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("stderr", sa.Float, nullable=True),
        sa.Column("ci_low", sa.Float, nullable=True),
        sa.Column("ci_high", sa.Float, nullable=True),
        sa.Column("n", sa.Integer, nullable=True),
        sa.UniqueConstraint("run_task_id", "name"),
    )
    op.create_table(
        "speed",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_task_id", sa.Integer, sa.ForeignKey("run_tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Float, nullable=True),
        sa.UniqueConstraint("run_task_id", "key"),
    )


def downgrade() -> None:
    for table in ("speed", "metrics", "run_tasks", "runs"):
        op.drop_table(table)
