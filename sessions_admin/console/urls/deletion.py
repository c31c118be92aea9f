"""The deletion screens: cascade and bulk delete, the jobs they start, and the trash."""

from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import delete, jobs, trash

urlpatterns = [
    path("sessions/<session_id:session_id>/delete/", delete.cascade_delete, name="cascade_delete"),
    path(
        "sessions/<session_id:session_id>/delete/confirm/",
        delete.cascade_delete_confirm,
        name="cascade_delete_confirm",
    ),
    path("bulk-delete/", delete.bulk_delete, name="bulk_delete"),
    path("bulk-delete/preview/", delete.bulk_delete_preview, name="bulk_delete_preview"),
    path("bulk-delete/start/", delete.bulk_delete_start, name="bulk_delete_start"),
    path("jobs/", jobs.job_list, name="job_list"),
    path("jobs/<rowid:job_id>/", jobs.job_detail, name="job_detail"),
    path("jobs/<rowid:job_id>/cancel/", jobs.job_cancel, name="job_cancel"),
    path("jobs/<rowid:job_id>/resume/", jobs.job_resume, name="job_resume"),
    path("trash/", trash.trash, name="trash"),
    path("trash/<rowid:entry_id>/restore/", trash.trash_restore, name="trash_restore"),
    path("trash/purge/", trash.trash_purge, name="trash_purge"),
]
