"""Output helpers shared by the commands: atomic file writes (never a half-written file) and a progress spinner."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from fleetplan.fileio import atomic_path, write_text_atomic

__all__ = ["atomic_path", "progress_status", "write_text_atomic"]


@contextlib.contextmanager
def progress_status(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr that shows the current step and the elapsed time (rich); yields ``say(text)``."""
    if not enabled:
        yield lambda s: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    t0 = time.perf_counter()
    with console.status("starting") as status:
        def say(text: str) -> None:
            status.update(f"{text} ({time.perf_counter() - t0:.0f} s)")

        yield say
