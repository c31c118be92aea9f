"""Settings of the benchmark process: the product's, plus Django admin over the store models.

The product never exposes Django admin over the store (its writes would bypass the
core); the benchmark needs it only as a yardstick (bench/admin_site.py), so admin is
added here, in the bench process alone. DEBUG stays off, as in production, so templates
come from the cached loader and no query log is kept.
"""

from __future__ import annotations

from sessions_admin.settings import *  # noqa: F403
from sessions_admin.settings import ALLOWED_HOSTS, INSTALLED_APPS

DEBUG = False
# Django's test client sends Host: testserver. The bench does not call
# setup_test_environment(), which would allow that host but also instrument every
# template render (a signal and a copy of the context per render, partials included)
# and so inflate exactly the time being measured.
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]
if "django.contrib.admin" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "django.contrib.admin"]
ROOT_URLCONF = "bench.urls"
