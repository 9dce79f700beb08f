"""Alembic's environment for the service's store: migrations run on the connection the caller gives
(``config.attributes["connection"]``, inside its transaction), never on a URL of their own. Imported outside a
migration (a module walk), it does nothing."""

from __future__ import annotations

from alembic import context


def run_migrations(connection) -> None:
    """Run the pending migrations on ``connection`` (batch mode: SQLite alters a table by copying it, as ALTER TABLE
    cannot change its columns or keys)."""
    context.configure(connection=connection, target_metadata=None, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if hasattr(context, "config"):  # alembic loads this file with its context set up
    run_migrations(context.config.attributes["connection"])
