from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import sessions

urlpatterns = [
    path("", sessions.session_list, name="session_list"),
]
