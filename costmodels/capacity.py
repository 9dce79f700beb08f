"""Capacity of one replica under an SLO (to be implemented: see the module docstring of latency.py)."""
