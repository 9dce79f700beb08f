"""fleetplan.costmodels."""
