from __future__ import annotations

from django.urls import path

from sessions_admin.console.views import probes

# At the root, without a trailing slash, as load balancers and Prometheus expect them; the
# sign-in middleware leaves these paths alone (signin.middleware.PROBE_PATHS).
urlpatterns = [
    path("healthz", probes.healthz, name="healthz"),
    path("readyz", probes.readyz, name="readyz"),
    path("metrics", probes.metrics_view, name="metrics"),
]
