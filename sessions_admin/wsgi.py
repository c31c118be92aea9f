from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
application = get_wsgi_application()

# Whatever server loads this module: no serving without a secret key of our own.
from sessions_admin.signin.checks import require_secret_key  # noqa: E402

require_secret_key()
