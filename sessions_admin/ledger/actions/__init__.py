"""Operator actions, audited (being split into modules by domain: issue 27)."""

from sessions_admin.ledger.actions.deletion import *  # noqa: F403
from sessions_admin.ledger.actions.deletion import _complete  # noqa: F401
