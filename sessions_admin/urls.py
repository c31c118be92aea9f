from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions_admin.api.app import urlpatterns as api_urlpatterns

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="console/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api_urlpatterns()),
    # Health, readiness and metrics for load balancers and Prometheus (no sign-in).
    path("", include("sessions_admin.console.urls.probes")),
    # One urls module per area of the console.
    path("", include("sessions_admin.console.urls.overview")),
    path("sessions/", include("sessions_admin.console.urls.sessions")),
    path("sessions/", include("sessions_admin.console.urls.detail")),
    path("sessions/", include("sessions_admin.console.urls.session_actions")),
    path("", include("sessions_admin.console.urls.merge")),
    path("", include("sessions_admin.console.urls.audit")),
    path("", include("sessions_admin.console.urls.deletion")),
    path("", include("sessions_admin.console.urls.governance")),
    path("", include("sessions_admin.console.urls.portability")),
    path("", include("sessions_admin.signin.urls")),
    path("", include("sessions_admin.console.urls.stray")),
]
