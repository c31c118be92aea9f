"""Settings of the benchmark process: the product's, plus Django admin over the store models.

The product never exposes Django admin over the store (its writes would bypass the
core); the benchmark needs it only as a yardstick (bench/admin_site.py), so admin is
added here, in the bench process alone. DEBUG stays off, as in production, so templates
come from the cached loader and no query log is kept.
"""

from __future__ import annotations

from sessions_admin.settings import *  # noqa: F403
from sessions_admin.settings import INSTALLED_APPS

DEBUG = False
if "django.contrib.admin" not in INSTALLED_APPS:
    INSTALLED_APPS = [*INSTALLED_APPS, "django.contrib.admin"]
ROOT_URLCONF = "bench.urls"
