"""fleetplan: plan LLM-serving GPU fleets.

The repository's top-level folders install as subpackages of this one import package:
``fleetplan.placement``, ``fleetplan.solvers``, ``fleetplan.costmodels``, ``fleetplan.datasets``, ``fleetplan.cli``.
"""

__version__ = "0.1.0"
