"""Verdicts: the gate's decisions (which runs on which side, every rule) and the watch's ticks.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gates",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("decided_at", sa.DateTime, nullable=False, index=True),
        sa.Column("verdict", sa.String(16), nullable=False, index=True),
        sa.Column("baseline", sa.String(1024), nullable=True),
        sa.Column("candidate", sa.String(1024), nullable=False),
        sa.Column("out_dir", sa.String(1024), nullable=True),
        sa.Column("reasons", sa.JSON, nullable=True),
        sa.Column("policy", sa.JSON, nullable=True),
    )
    op.create_table(
        "gate_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("gate_id", sa.Integer, sa.ForeignKey("gates.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("role", sa.String(16), nullable=False),
    )
    op.create_table(
        "gate_rules",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("gate_id", sa.Integer, sa.ForeignKey("gates.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("task", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        *(
            sa.Column(name, sa.Float, nullable=True)
            for name in ("observed", "baseline", "candidate", "budget", "p_value", "ci_low", "ci_high")
        ),
        sa.Column("note", sa.Text, nullable=True),
    )
    op.create_table(
        "watch_ticks",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("watch_dir", sa.String(1024), nullable=False),
        sa.Column("task", sa.String(255), nullable=False),
        sa.Column("tick", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("started_at", sa.String(40), nullable=True),
        sa.Column("finished_at", sa.String(40), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("p_value", sa.Float, nullable=True),
        sa.Column("failed_rules", sa.JSON, nullable=True),
        sa.Column("rules", sa.JSON, nullable=True),
        sa.Column("window", sa.JSON, nullable=True),
        sa.UniqueConstraint("watch_dir", "tick"),
        sa.Index("ix_watch_ticks_task", "task"),
    )


def downgrade() -> None:
    for table in ("watch_ticks", "gate_rules", "gate_runs", "gates"):
        op.drop_table(table)
