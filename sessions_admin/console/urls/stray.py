from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import stray

urlpatterns = [
    path(
        "sessions/<session_id:session_id>/stray/",
        stray.stray_move_preview,
        name="stray_move_preview",
    ),
    path(
        "sessions/<session_id:session_id>/stray/move/",
        stray.stray_move_execute,
        name="stray_move_execute",
    ),
    path("stray-moves/<rowid:entry_id>/undo/", stray.stray_move_undo, name="stray_move_undo"),
]
