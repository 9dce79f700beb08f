"""The online re-planner service (``fleetplan serve``): FastAPI app, SQLAlchemy store, metrics."""
