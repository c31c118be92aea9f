"""The core's clock: every time the core stamps (ended_at, new ids, event times) comes from here.

A runtime or a simulator replaying history can substitute its own clock for
the duration of a block with ``use_clock``; threads share it, so only use it
where nothing else is writing through the core at the same moment.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

_clock: Callable[[], float] = time.time


def now() -> float:
    return _clock()


@contextlib.contextmanager
def use_clock(clock: Callable[[], float]) -> Iterator[None]:
    global _clock
    previous = _clock
    _clock = clock
    try:
        yield
    finally:
        _clock = previous
