"""Leader election, retention and ordered ids.

- ``leases``: the lease row of the one active re-planner per database (holder, epoch: the fencing token, expiry);
- ``plans.epoch``: the lease epoch of the leader that committed each plan (0 for plans made before);
- ``service_meta``: small facts of the store (``folded_through_id``: observations up to this id were folded into
  the stored forecaster state by retention and removed);
- ``observations`` ids never reused: on SQLite the table is copied into one with AUTOINCREMENT (its rows and ids
  kept) and its counter set above every id a plan claims, so deleting the newest observation cannot hand its id to
  the next one (a plan's ``last_observation_id`` would claim a row it never fed, and a restart would not replay it);
- indexes for retention and DELETE by time: ``observations.at_s``, ``plans.at_s``, ``plans.last_observation_id``.

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
        "leases",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("expires_at_s", sa.Float, nullable=False),
        sa.Column("renewed_at_s", sa.Float, nullable=False),
    )
    op.create_table(
        "service_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer, nullable=False, server_default="0"))
    op.create_index("ix_plans_at_s", "plans", ["at_s"])
    op.create_index("ix_plans_last_observation_id", "plans", ["last_observation_id"])
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("observations", recreate="always",
                                  table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.create_index("ix_observations_at_s", ["at_s"])
        # the next id must be above every id a plan ever claimed (the newest observation may have been deleted and
        # its id would have been handed out again)
        op.execute("INSERT INTO sqlite_sequence (name, seq) SELECT 'observations', 0 WHERE NOT EXISTS "
                   "(SELECT 1 FROM sqlite_sequence WHERE name = 'observations')")
        op.execute("UPDATE sqlite_sequence SET seq = max(seq, (SELECT coalesce(max(id), 0) FROM observations), "
                   "(SELECT coalesce(max(last_observation_id), 0) FROM plans)) WHERE name = 'observations'")
    else:
        op.create_index("ix_observations_at_s", "observations", ["at_s"])
        bind = op.get_bind()  # PostgreSQL's sequence never goes back, but a copied database may have lost it
        seq = bind.execute(sa.text("SELECT pg_get_serial_sequence('observations', 'id')")).scalar()
        if seq is not None:
            last = bind.execute(sa.text(f"SELECT last_value FROM {seq}")).scalar() or 0
            top = bind.execute(sa.text("SELECT greatest((SELECT coalesce(max(id), 0) FROM observations), "
                                       "(SELECT coalesce(max(last_observation_id), 0) FROM plans))")).scalar() or 0
            if top > last:
                bind.execute(sa.text("SELECT setval(:seq, :top)"), {"seq": seq, "top": top})


def downgrade() -> None:
    op.drop_index("ix_observations_at_s", "observations")
    op.drop_index("ix_plans_last_observation_id", "plans")
    op.drop_index("ix_plans_at_s", "plans")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("epoch")
    op.drop_table("service_meta")
    op.drop_table("leases")
