from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import portability

urlpatterns = [
    path("export/", portability.export, name="export_sessions"),
    path(
        "sessions/<session_id:session_id>/export/",
        portability.export_session,
        name="export_session",
    ),
]
