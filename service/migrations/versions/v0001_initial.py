"""The store's schema before migrations existed (fleetplan 0.1, ``metadata.create_all``): observations, plans, diffs,
idempotency keys and the readiness probe's row. A database made then has these tables and no version; it is stamped
with this revision and upgraded from here.

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
        "observations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("received_at_s", sa.Float, nullable=False),
        sa.Column("at_s", sa.Float, nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.Column("interval_s", sa.Float, nullable=False),
        sa.Column("demand_req_per_s", sa.Float, nullable=False),
        sa.Column("source", sa.String(40), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_observations_model", "observations", ["model"])
    op.create_table(
        "plans",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at_s", sa.Float, nullable=False),
        sa.Column("at_s", sa.Float, nullable=False),
        sa.Column("window", sa.Integer, nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.Column("cost_usd_per_hour", sa.Float, nullable=False),
        sa.Column("migrations", sa.Integer, nullable=False),
        sa.Column("valid", sa.Integer, nullable=False),
        sa.Column("last_observation_id", sa.Integer, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_plans_created_at_s", "plans", ["created_at_s"])
    op.create_table(
        "diffs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("plan_id", sa.Integer, sa.ForeignKey("plans.id"), nullable=False),
        sa.Column("previous_plan_id", sa.Integer, nullable=True),
        sa.Column("created_at_s", sa.Float, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_index("ix_diffs_plan_id", "diffs", ["plan_id"])
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("ids", sa.Text, nullable=False),
        sa.Column("created_at_s", sa.Float, nullable=False),
    )
    op.create_index("ix_idempotency_keys_created_at_s", "idempotency_keys", ["created_at_s"])
    op.create_table(
        "probes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at_s", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for name in ("probes", "idempotency_keys", "diffs", "plans", "observations"):
        op.drop_table(name)
