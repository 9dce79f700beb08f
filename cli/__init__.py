"""fleetplan.cli."""
