"""Data governance: legal holds (which every delete respects), retention policies and their
runs, erasure requests and their receipts; the HTTP API's tokens."""

from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import api_tokens, erasure, holds, retention

urlpatterns = [
    path("api-tokens/", api_tokens.api_tokens, name="api_tokens"),
    path("api-tokens/create/", api_tokens.api_token_create, name="api_token_create"),
    path("api-tokens/revoke/", api_tokens.api_token_revoke, name="api_token_revoke"),
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
