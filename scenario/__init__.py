"""fleetplan.scenario: compiling input files into problems.

A scenario file is read and checked (:mod:`.schemas`, :mod:`.read`), its pools priced (:mod:`.pools`), its measured
profiles (:mod:`.profiles`) and request classes (:mod:`.classes`) read, and it is built into a placement
:class:`~fleetplan.placement.problem.Problem` (:mod:`.build`, prefill/decode options in :mod:`.disagg`). Sweeps vary
a scenario over a grid (:mod:`.sweep`); the tenants file (:mod:`.tenants`) and the split design file
(:mod:`.split`) are compiled here too. This layer sits between the core records (``fleetplan.placement``) and the
solvers.
"""
