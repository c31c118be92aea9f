from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import detail

urlpatterns = [
    path("<session_id:session_id>/", detail.session_detail, name="session_detail"),
    path(
        "<session_id:session_id>/transcript/", detail.session_transcript, name="session_transcript"
    ),
    path("<session_id:session_id>/tail/", detail.session_tail, name="session_tail"),
    path("<session_id:session_id>/raw/", detail.session_raw, name="session_raw"),
]
