"""Run kind: each run's ``kind`` (run, sweep point or watch tick), filled for the runs already recorded from who
recorded them (``source``). Their ``config_hash`` stays as it was computed; runs recorded from now on hash the
wider identity (sampling, max tokens, concurrency or rate, endpoints, the server's own identity), so an old run
and a new one of the same config trend as two configs.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=True))
    op.execute(
        "UPDATE runs SET kind = CASE source WHEN 'sweep' THEN 'sweep point' WHEN 'watch' THEN 'watch tick' "
        "ELSE 'run' END"
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("kind")
