"""fleetplan.solvers."""
