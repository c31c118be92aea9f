"""The deletion screens: cascade and bulk delete, the jobs they start, the trash, and the
legal holds every one of them respects."""

from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import delete, erasure, holds, jobs, retention, trash

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
    path("holds/", holds.hold_list, name="holds"),
    path("holds/place/", holds.hold_place, name="hold_place"),
    path("holds/<rowid:hold_id>/release/", holds.hold_release, name="hold_release"),
    path("retention/", retention.retention_list, name="retention"),
    path("retention/create/", retention.retention_create, name="retention_create"),
    path(
        "retention/<rowid:policy_id>/switch/", retention.retention_switch, name="retention_switch"
    ),
    path(
        "retention/<rowid:policy_id>/run/preview/",
        retention.retention_preview,
        name="retention_preview",
    ),
    path("retention/<rowid:policy_id>/run/", retention.retention_run, name="retention_run"),
    path(
        "retention/<rowid:policy_id>/delete/", retention.retention_delete, name="retention_delete"
    ),
    path("erasure/", erasure.erasure_list, name="erasure"),
    path("erasure/preview/", erasure.erasure_preview, name="erasure_preview"),
    path("erasure/confirm/", erasure.erasure_confirm, name="erasure_confirm"),
    path("erasure/verify/", erasure.erasure_verify, name="erasure_verify"),
    path("erasure/<rowid:request_id>/rewrite/", erasure.erasure_rewrite, name="erasure_rewrite"),
    path("erasure/<rowid:request_id>/", erasure.erasure_detail, name="erasure_detail"),
    path(
        "erasure/<rowid:request_id>/receipt.json",
        erasure.erasure_receipt,
        name="erasure_receipt",
    ),
]
