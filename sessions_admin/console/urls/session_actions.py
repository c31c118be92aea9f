from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import session_actions

urlpatterns = [
    path("<session_id:session_id>/resume/", session_actions.session_resume, name="session_resume"),
    path("<session_id:session_id>/reset/", session_actions.session_reset, name="session_reset"),
    path("<session_id:session_id>/undo/", session_actions.session_undo, name="session_undo"),
    path("<session_id:session_id>/redo/", session_actions.session_redo, name="session_redo"),
    path("<session_id:session_id>/retry/", session_actions.session_retry, name="session_retry"),
    path(
        "<session_id:session_id>/recount/", session_actions.session_recount, name="session_recount"
    ),
]
