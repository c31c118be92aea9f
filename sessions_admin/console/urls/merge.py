from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import merge

urlpatterns = [
    path("forks/", merge.fork_list, name="fork_list"),
    path("merge/preview/", merge.merge_preview, name="merge_preview"),
    path("merge/", merge.merge_execute, name="merge_execute"),
    path("merges/<rowid:merge_id>/undo/", merge.merge_undo, name="merge_undo"),
]
