"""fleetplan.solvers.tenants: multi-tenant pool allocation: the MILP (:mod:`.milp`) and CP-SAT (:mod:`.cpsat`)
node-level models, the weighted, lexicographic and Pareto modes over either (:mod:`.allocate`), the baselines
(:mod:`.baselines`: static partitions, fair share, greedy packing) and the split inside a node into MIG slices or
MPS shares (:mod:`.slicing`)."""
