"""fleetplan.solvers.online: the online re-planner: its policy knobs (:mod:`.config`), the demand forecast
(:mod:`.forecast`), the live placement and the records of a round (:mod:`.state`), and the rounds themselves
(:mod:`.replanner`)."""
