"""The product's URLs plus the bench-only Django admin and the two Django floors.

/bench-floor/ is an empty page in the console's layout (base.html, with the same
context processors), /bench-floor/empty/ a bare response; both pass through the same
middleware and login as every console page, so they show what a page costs before it
does any work of its own.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import include, path

from bench.admin_site import site


def layout_floor(request):
    return render(request, "base.html", {})


def empty_floor(request):
    return HttpResponse("ok")


urlpatterns = [
    path("bench-admin/", site.urls),
    path("bench-floor/", layout_floor),
    path("bench-floor/empty/", empty_floor),
    path("", include("sessions_admin.urls")),
]
