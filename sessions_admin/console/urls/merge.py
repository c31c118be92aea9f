from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import merge

urlpatterns = [
    path("forks/", merge.fork_list, name="fork_list"),
    path("merge/preview/", merge.merge_preview, name="merge_preview"),
    path("merge/", merge.merge_execute, name="merge_execute"),
    path("merges/<rowid:merge_id>/undo/", merge.merge_undo, name="merge_undo"),
    path("audit/", merge.audit_log, name="audit_log"),
    path("audit/session/<session_id:session_id>/", merge.session_history, name="session_history"),
]
