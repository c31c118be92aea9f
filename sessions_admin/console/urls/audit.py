from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import audit

urlpatterns = [
    path("audit/", audit.audit_log, name="audit_log"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
    path("audit/session/<session_id:session_id>/", audit.session_history, name="session_history"),
]
