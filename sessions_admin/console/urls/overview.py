from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import home, sessions

urlpatterns = [
    path("", home.home, name="home"),
    path("health/", home.health_panel, name="health_panel"),
    path("conversations/", home.conversation_list, name="conversation_list"),
    # Not under sessions/, where any name could be a session id.
    path("activity/sessions/", sessions.session_activity, name="session_activity"),
    path("activity/fork-marks/", sessions.fork_marks, name="fork_marks"),
]
