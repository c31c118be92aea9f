"""The dashboard's own tables (default database only; never in the store)."""

from __future__ import annotations

from django.db import models


class StoreAccess(models.Model):
    """Carries the console's permissions; it has no table of its own."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_store", "Browse sessions, transcripts and conversations"),
            ("operate_sessions", "Merge, resume, reset and undo sessions"),
            ("delete_sessions", "Delete sessions, in cascade or in bulk"),
        ]
