"""The core's clock: every time the core stamps (ended_at, new ids, event times) comes from here.

A runtime or a simulator replaying history can substitute its own clock for
the duration of a block with ``use_clock``; threads share it, so only use it
where nothing else is writing through the core at the same moment.
"""

from __future__ import annotations

import contextlib
import datetime as dt
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


def moment_of(timestamp: object) -> dt.datetime | None:
    """A stored unix-seconds value as an aware UTC datetime; None when it is not one.

    The store's REAL columns hold whatever a runtime wrote (NULL, text, out of range):
    every reader turns them into a time here, and shows nothing for what is not one.
    """
    if timestamp is None or timestamp == "":
        return None
    try:
        return dt.datetime.fromtimestamp(float(timestamp), tz=dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
