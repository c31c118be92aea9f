"""A typical Django admin over the store's models: the yardstick the console is measured against.

Bench only (see bench/settings.py). The ModelAdmins are what a developer would write
in a few minutes for the same data: the columns our session list shows, a source filter
and a started-since filter, search on id and title for sessions, and message search the
way admin does it (``content__icontains``: a scan, as admin has no full-text index).
Admin's defaults stay as they are (100 rows a page, the full result count, offset
pagination), since those are what an operator using admin would get.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import admin

from sessions_admin.store.models import Message, Session

site = admin.AdminSite(name="bench_admin")


class StartedSinceFilter(admin.SimpleListFilter):
    # started_at is a Unix timestamp (a float), so admin's date_hierarchy and date filters
    # don't apply; a since-date filter on the timestamp is the usual workaround.
    title = "started since"
    parameter_name = "started_since"

    def lookups(self, request, model_admin):
        today = dt.datetime.now(dt.UTC).date()
        return [(str(today - dt.timedelta(days=days)), f"{days} days") for days in (1, 7, 30)]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        try:
            day = dt.date.fromisoformat(self.value())
        except ValueError:
            return queryset.none()
        since = dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()
        return queryset.filter(started_at__gte=since)


@admin.register(Session, site=site)
class SessionAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "title",
        "source",
        "user_id",
        "model",
        "started_at",
        "ended_at",
        "end_reason",
        "message_count",
        "input_tokens",
        "output_tokens",
        "estimated_cost_usd",
    ]
    list_filter = ["source", StartedSinceFilter]
    search_fields = ["id", "title"]


@admin.register(Message, site=site)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["id", "session", "role", "content", "timestamp"]
    list_select_related = ["session"]
    search_fields = ["content"]
