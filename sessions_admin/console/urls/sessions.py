from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import list_export, sessions

urlpatterns = [
    path("", sessions.session_list, name="session_list"),
    path("export.csv", list_export.session_export, name="session_export"),
]
