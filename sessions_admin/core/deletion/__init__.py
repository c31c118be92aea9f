"""Cascade delete, bulk delete and the trash (being split into modules: issue 27)."""

from sessions_admin.core.deletion.plan import *  # noqa: F403
from sessions_admin.core.deletion.plan import _same_rows  # noqa: F401
