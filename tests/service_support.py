"""What the re-planner service's tests share: the bearer token, a fixed 20:00 UTC start, the model most tests
observe, and a clock the tests move by hand (the service takes ``clock=`` so nothing waits on real time)."""

from __future__ import annotations

TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = 1_700_000_000.0 - (1_700_000_000.0 % 86400) + 20 * 3600  # 20:00 UTC of some day
M = "Llama-3.1-8B"


class Clock:
    """A clock for the service: returns ``t``, seconds since the epoch, which a test sets."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def free_port() -> int:
    """A loopback port nothing listens on now (for `fleetplan serve`, which checks its port before it starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
