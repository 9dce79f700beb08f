"""Discrete-event replay of a plan: continuous batching per replica, a router, KV-memory limits."""
