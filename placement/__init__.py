"""fleetplan.placement."""
