"""Schema migrations of the service's store (Alembic): ``fleetplan serve`` upgrades its database on start
(:meth:`fleetplan.service.store.Store.migrate`). A database made before migrations existed (its tables, no
``alembic_version``) is revision 0001 and is upgraded in place."""
