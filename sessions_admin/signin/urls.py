from __future__ import annotations

from django.urls import path

from sessions_admin.signin import views

urlpatterns = [
    path("audit/sign-ins/", views.signin_failures, name="signin_failures"),
]
