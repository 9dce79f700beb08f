"""fleetplan.datasets."""
