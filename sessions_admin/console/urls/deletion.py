from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import deletion

urlpatterns = [
    path(
        "sessions/<session_id:session_id>/delete/", deletion.cascade_delete, name="cascade_delete"
    ),
    path(
        "sessions/<session_id:session_id>/delete/confirm/",
        deletion.cascade_delete_confirm,
        name="cascade_delete_confirm",
    ),
    path("bulk-delete/", deletion.bulk_delete, name="bulk_delete"),
    path("bulk-delete/preview/", deletion.bulk_delete_preview, name="bulk_delete_preview"),
    path("bulk-delete/start/", deletion.bulk_delete_start, name="bulk_delete_start"),
    path("jobs/", deletion.job_list, name="job_list"),
    path("jobs/<rowid:job_id>/", deletion.job_detail, name="job_detail"),
    path("jobs/<rowid:job_id>/cancel/", deletion.job_cancel, name="job_cancel"),
    path("trash/", deletion.trash, name="trash"),
    path("trash/<rowid:entry_id>/restore/", deletion.trash_restore, name="trash_restore"),
    path("trash/purge/", deletion.trash_purge, name="trash_purge"),
]
