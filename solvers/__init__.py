"""fleetplan.solvers: MILP (PuLP; HiGHS, CBC) and CP-SAT (OR-Tools) models built from a placement Problem.

Use :func:`fleetplan.solvers.solve.solve`.
"""
