"""Row primitives every core module shares (reading a session's model_config, ...).

Kept in a module of their own so lifecycle, transcript and conversations can all use
them without importing one another.
"""

from __future__ import annotations

import json


def parse_model_config(text: str | None) -> dict:
    """model_config as a dict; a runtime may have written anything there."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
