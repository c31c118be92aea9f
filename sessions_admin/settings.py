"""Django settings for sessions_admin.

Everything an operator changes comes from the environment (the README's configuration table
says what each does): ``DATABASE_URL`` (the dashboard's own tables), ``SESSIONS_ADMIN_STORE_URL``
(the runtime's ``state.db``), ``SESSIONS_ADMIN_RESPONSES_URL`` (an optional separate
``response_store.db``), ``SESSIONS_ADMIN_READ_ONLY`` (docs/attach.md), ``SESSIONS_ADMIN_CACHE_URL``,
``SESSIONS_ADMIN_JOB_POLL_SECONDS``, ``SESSIONS_ADMIN_SECRET_KEY``, ``SESSIONS_ADMIN_DEBUG``,
``SESSIONS_ADMIN_ALLOWED_HOSTS``, the sign-in limits (``SESSIONS_ADMIN_SIGNIN_*``,
``SESSIONS_ADMIN_IDLE_MINUTES``, ``SESSIONS_ADMIN_SESSION_MAX_HOURS``) and production's
``SESSIONS_ADMIN_HTTPS``, ``SESSIONS_ADMIN_BEHIND_PROXY``, ``SESSIONS_ADMIN_HSTS_SECONDS``,
``SESSIONS_ADMIN_CSRF_TRUSTED_ORIGINS``; observability's ``SESSIONS_ADMIN_METRICS_TOKEN``,
``SESSIONS_ADMIN_METRICS_NETWORKS``, ``SESSIONS_ADMIN_LOG_FORMAT`` and ``SESSIONS_ADMIN_LOG_LEVEL``."""

from __future__ import annotations

import ipaddress
import os
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured

from sessions_admin.dburl import parse_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SESSIONS_ADMIN_VAR_DIR", BASE_DIR / "var")).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int, *, minimum: int = 1) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}.")
    return number


DEBUG = _env_bool("SESSIONS_ADMIN_DEBUG", False)
# No built-in fallback: a key everyone can read lets anyone forge a signed cookie. The
# dashboard server refuses to start without one (sessions_admin/signin/checks.py: gunicorn,
# the WSGI module, ``check --deploy``); commands and runtimes that sign nothing run without.
# The demo keeps a generated key in var/secret_key (devtools.demo_secret_key), read here too
# when no key is set, so a command run beside the demo (erase_subject, verify_receipt) signs
# and checks with the key its server uses; pytest (which sets PYTEST_VERSION for the length of
# a run) gets a throwaway key per process.
SECRET_KEY = os.environ.get("SESSIONS_ADMIN_SECRET_KEY", "").strip()
if not SECRET_KEY:
    try:
        SECRET_KEY = (VAR_DIR / "secret_key").read_text().strip()
    except (OSError, UnicodeDecodeError):
        SECRET_KEY = ""
if not SECRET_KEY and os.environ.get("PYTEST_VERSION"):
    SECRET_KEY = "tests-only-" + secrets.token_urlsafe(48)
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("SESSIONS_ADMIN_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "axes",
    "sessions_admin.signin",
    "sessions_admin.store",
    "sessions_admin.console",
    "sessions_admin.ledger",
    "sessions_admin.api",
    # django-ninja's templates and vendored Swagger UI for /api/v1/docs (no CDN).
    "ninja",
]

MIDDLEWARE = [
    # First: its one line per request (with X-Request-ID) and the latency metric see every answer.
    "sessions_admin.console.requestlog.RequestLogMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "sessions_admin.console.middleware.PageResponseMiddleware",
    # Before everything that refuses (CSRF, sign-in, permissions): audit entries name the client.
    "sessions_admin.ledger.context.RequestClientMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "sessions_admin.signin.middleware.SessionLifetimeMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "sessions_admin.console.http.VaryOnHtmxMiddleware",
    "sessions_admin.console.http.StoreBusyMiddleware",
    "sessions_admin.security.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sessions_admin.urls"
WSGI_APPLICATION = "sessions_admin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "sessions_admin.console.context_processors.operator",
            ],
        },
    }
]

# PostgreSQL connections come from a pool in each process (README "Connections to
# PostgreSQL"): at most SESSIONS_ADMIN_DB_POOL_SIZE per database, by default a gunicorn
# worker's threads and four for its background threads, so no thread ever waits for another's
# connection; idle ones are closed after a minute, down to one. SESSIONS_ADMIN_DB_POOL_SIZE=0:
# a new connection per request (for a pooler in front, such as PgBouncer).
# SESSIONS_ADMIN_DB_CONN_MAX_AGE > 0 keeps one connection per thread instead, as before pools.
_CONN_MAX_AGE = _env_int("SESSIONS_ADMIN_DB_CONN_MAX_AGE", 0, minimum=0)
_POOL_SIZE = _env_int(
    "SESSIONS_ADMIN_DB_POOL_SIZE",
    _env_int("SESSIONS_ADMIN_THREADS", 16) + 4,
    minimum=0,
)
DATABASES = {
    # VAR_DIR is absolute, so these defaults read sqlite:////abs/path.
    "default": parse_database_url(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR}/dashboard.db"),
        base_dir=BASE_DIR,
        conn_max_age=_CONN_MAX_AGE,
        pool_size=_POOL_SIZE,
    ),
    "store": parse_database_url(
        os.environ.get("SESSIONS_ADMIN_STORE_URL", f"sqlite:///{VAR_DIR}/state.db"),
        base_dir=BASE_DIR,
        conn_max_age=_CONN_MAX_AGE,
        pool_size=_POOL_SIZE,
    ),
}
_responses_url = os.environ.get("SESSIONS_ADMIN_RESPONSES_URL", "").strip()
if _responses_url:
    DATABASES["responses"] = parse_database_url(
        _responses_url, base_dir=BASE_DIR, conn_max_age=_CONN_MAX_AGE, pool_size=_POOL_SIZE
    )

# Test databases are per process, so test runs in one checkout never share a
# file or database. SQLite test stores are real files: concurrency tests need
# the WAL locking the runtime shares with us, which in-memory databases lack.
for _alias, _db in DATABASES.items():
    if _db["ENGINE"].endswith("sqlite3"):
        _test_dir = VAR_DIR / "test"
        _test_dir.mkdir(exist_ok=True)
        _db["TEST"] = {"NAME": str(_test_dir / f"{os.getpid()}_{Path(_db['NAME']).name}")}
    else:
        _db["TEST"] = {"NAME": f"test_{_db['NAME']}_{os.getpid()}"[:63]}

# Read-only attach (docs/attach.md): no store write, no schema change, no write lock.
# SQLite store files open with mode=ro and deferred transactions; each connection gets
# temporary stand-ins for what attach would add, then query_only (store/attach.py).
# PostgreSQL sessions are read-only transactions. The core refuses every operation
# (core/db.py) and operators lose the operate/delete permissions (the backend below).
SESSIONS_ADMIN_READ_ONLY = _env_bool("SESSIONS_ADMIN_READ_ONLY", False)
if SESSIONS_ADMIN_READ_ONLY:
    for _alias in ("store", "responses"):
        if _alias not in DATABASES:
            continue
        _db = DATABASES[_alias]
        if _db["ENGINE"].endswith("sqlite3"):
            _db["NAME"] = f"file:{quote(_db['NAME'])}?mode=ro"
            _db["OPTIONS"]["transaction_mode"] = "DEFERRED"
            _db["OPTIONS"]["init_command"] = ""
        else:
            _db["OPTIONS"]["options"] = (
                _db["OPTIONS"].get("options", "") + " -c default_transaction_read_only=on"
            ).strip()

DATABASE_ROUTERS = ["sessions_admin.routers.StoreRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: a locked-out user name or address is refused before any password is
# hashed. Then Django's model backend, withholding operate/delete in read-only mode (before
# ModelBackend so its refusal wins; ModelBackend stays listed for sessions signed in before
# it existed).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "sessions_admin.store.attach.ReadOnlyPermissionBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# create_operator also refuses a blank (whitespace-only) password.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Sign-in throttling (django-axes, README "Running in production"): after
# SESSIONS_ADMIN_SIGNIN_FAILURES failed sign-ins for one user name, or from one client
# address, that name or address is refused for SESSIONS_ADMIN_SIGNIN_COOLOFF_MINUTES after
# its last failure, whatever the password, and without hashing it. Unknown and real names
# count alike and get the same answers. Every failure is kept (AccessFailureLog: name,
# address, user agent, time) for admins at /audit/sign-ins/.
AXES_FAILURE_LIMIT = _env_int("SESSIONS_ADMIN_SIGNIN_FAILURES", 10)
AXES_COOLOFF_TIME = timedelta(minutes=_env_int("SESSIONS_ADMIN_SIGNIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either one reaching the limit locks
AXES_LOCK_OUT_AT_FAILURE = True
AXES_RESET_ON_SUCCESS = False  # a valid account must not clear its address's failures
# Refused attempts during a lockout add nothing to axes's tables and do not extend it: they
# do not grow with an attacker's request rate, and the lockout ends a cool-off after the last
# counted failure.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_ACCESS_FAILURE_LOG_PER_USER_LIMIT = 1000
AXES_CLIENT_IP_CALLABLE = "sessions_admin.signin.lockout.client_address"
AXES_USERNAME_CALLABLE = "sessions_admin.signin.lockout.attempted_username"
AXES_LOCKOUT_CALLABLE = "sessions_admin.signin.views.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "password", "csrfmiddlewaretoken"]
AXES_VERBOSE = False

# Signed-in sessions end after SESSIONS_ADMIN_IDLE_MINUTES without a request and, however
# active, SESSIONS_ADMIN_SESSION_MAX_HOURS after signing in (SessionLifetimeMiddleware).
SESSIONS_ADMIN_IDLE_SECONDS = 60 * _env_int("SESSIONS_ADMIN_IDLE_MINUTES", 240)
SESSIONS_ADMIN_SESSION_MAX_SECONDS = 3600 * _env_int("SESSIONS_ADMIN_SESSION_MAX_HOURS", 12)
SESSION_COOKIE_AGE = SESSIONS_ADMIN_SESSION_MAX_SECONDS
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# One cache for every worker process (gunicorn runs several): store-wide figures
# such as fork detection are then computed once per period, not once per worker.
# SESSIONS_ADMIN_CACHE_URL chooses where (README "Running in production"):
#   unset        a file cache under the var directory: every worker on this host;
#   db://        Django's DatabaseCache in the dashboard's database (table
#                sessions_admin_cache, created by migrate and at server start): every
#                host that shares DATABASE_URL;
#   redis://...  Django's RedisCache (needs the redis package, not installed by us).
CACHE_TABLE = "sessions_admin_cache"


def _cache_from_url(url: str) -> dict:
    if not url:
        return {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    scheme = url.split(":", 1)[0].lower()
    if scheme == "db":
        return {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": CACHE_TABLE}
    if scheme in ("redis", "rediss", "unix"):
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    raise ImproperlyConfigured(
        f"SESSIONS_ADMIN_CACHE_URL must be empty, db:// or redis://..., not {url!r}."
    )


CACHES = {"default": _cache_from_url(os.environ.get("SESSIONS_ADMIN_CACHE_URL", "").strip())}

STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Serve straight from STATICFILES_DIRS too, so the demo works before collectstatic.
WHITENOISE_USE_FINDERS = True
# Files browsers ask for at the site's root (/favicon.ico), served before sign-in.
WHITENOISE_ROOT = BASE_DIR / "static" / "root"

# Production hardening (README "Running in production"); ``manage.py check --deploy`` is clean
# with SESSIONS_ADMIN_HTTPS=1 and a secret key of our own. The demo serves plain http on
# localhost, so nothing here forces HTTPS unless SESSIONS_ADMIN_HTTPS asks for it.
SESSION_COOKIE_HTTPONLY = True
CSRF_FAILURE_VIEW = "sessions_admin.console.http.csrf_failure"  # audited, then Django's page
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the body's hx-headers, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if _env_bool("SESSIONS_ADMIN_HTTPS", False):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SESSIONS_ADMIN_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
# Behind a proxy that terminates TLS, Django sees plain http: trust the proxy's
# X-Forwarded-Proto (the proxy must set it and drop any the client sent), or every
# request would be redirected to https again.
# The sign-in throttle then counts failures by the address the proxy appends to
# X-Forwarded-For (sessions_admin/signin/lockout.py).
SESSIONS_ADMIN_BEHIND_PROXY = _env_bool("SESSIONS_ADMIN_BEHIND_PROXY", False)
if SESSIONS_ADMIN_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = [
    o.strip()
    for o in os.environ.get("SESSIONS_ADMIN_CSRF_TRUSTED_ORIGINS", "").split(",")
    if o.strip()
]

# The session list posts one field per selected session (bulk delete takes up to 10,000).
DATA_UPLOAD_MAX_NUMBER_FIELDS = 20_000

# The HTTP API (docs/api.md): requests per token (or signed-in operator) per window, as
# "N/s", "N/min", "N/hour"; empty: no limit. Over it: 429 with Retry-After.
SESSIONS_ADMIN_API_RATE = os.environ.get("SESSIONS_ADMIN_API_RATE", "18000/min").strip()
# Refused authentications (no token, an unknown, revoked or expired one) per client address per
# window, as SESSIONS_ADMIN_API_RATE; past it 429 with Retry-After, not audited. Empty: no limit.
SESSIONS_ADMIN_API_AUTH_FAIL_RATE = os.environ.get(
    "SESSIONS_ADMIN_API_AUTH_FAIL_RATE", "60/min"
).strip()
# Long-lived API requests (switch streams, long polls that wait) each worker process serves at
# once: per token (or operator), and in all, a quarter of the worker's threads by default, so
# most threads are always left for other requests. Over either: 429 with Retry-After.
_threads = os.environ.get("SESSIONS_ADMIN_THREADS", "").strip()  # as gunicorn_conf reads it
_threads = int(_threads) if _threads.isascii() and _threads.isdigit() and int(_threads) > 0 else 16
SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN = _env_int("SESSIONS_ADMIN_LONG_REQUESTS_PER_TOKEN", 2)
SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER = _env_int(
    "SESSIONS_ADMIN_LONG_REQUESTS_PER_WORKER", max(1, _threads // 4)
)

# Deleted sessions stay restorable from the trash for this many days.
SESSIONS_ADMIN_TRASH_DAYS = int(os.environ.get("SESSIONS_ADMIN_TRASH_DAYS", "30"))
# Seconds between two looks for due retention policy runs (ledger/schedule.py); 0: none.
SESSIONS_ADMIN_RETENTION_CHECK_SECONDS = float(
    os.environ.get("SESSIONS_ADMIN_RETENTION_CHECK_SECONDS", "60")
)
# Seconds between two tries to finish an erasure's search index merge (SQLite) that a busy
# runtime kept from finishing; the same scheduler thread runs it.
SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS = float(
    os.environ.get("SESSIONS_ADMIN_ERASURE_INDEX_RETRY_SECONDS", "600")
)

# A waiting delete-job worker is woken the moment a job is created (ledger/wake.py); it
# also looks for jobs this often, for a job whose worker died (its lease runs out).
SESSIONS_ADMIN_JOB_POLL_SECONDS = float(os.environ.get("SESSIONS_ADMIN_JOB_POLL_SECONDS", "5"))
# A confirmed cascade delete or restore this large (messages, or more sessions than this)
# runs as a job with a progress page instead of in the request (ledger/jobs.py, measured).
SESSIONS_ADMIN_CASCADE_JOB_MESSAGES = int(
    os.environ.get("SESSIONS_ADMIN_CASCADE_JOB_MESSAGES", "5000")
)
SESSIONS_ADMIN_RESTORE_JOB_MESSAGES = int(
    os.environ.get("SESSIONS_ADMIN_RESTORE_JOB_MESSAGES", "2500")
)
SESSIONS_ADMIN_LONG_JOB_SESSIONS = int(os.environ.get("SESSIONS_ADMIN_LONG_JOB_SESSIONS", "200"))

# Observability (README "Observability"): /healthz, /readyz and /metrics need no sign-in.
# /metrics answers a caller with this bearer token, or from these networks (comma-separated
# addresses or CIDRs, compared with the client address the audit uses); anyone else is refused.
SESSIONS_ADMIN_METRICS_TOKEN = os.environ.get("SESSIONS_ADMIN_METRICS_TOKEN", "").strip()
if SESSIONS_ADMIN_METRICS_TOKEN and len(SESSIONS_ADMIN_METRICS_TOKEN) < 24:
    raise ImproperlyConfigured("SESSIONS_ADMIN_METRICS_TOKEN must be at least 24 characters.")


def _networks(name: str) -> list:
    found = []
    for value in os.environ.get(name, "").split(","):
        if value.strip():
            try:
                found.append(ipaddress.ip_network(value.strip(), strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    f"{name} must list addresses or networks (10.0.0.0/8), not {value.strip()!r}."
                ) from None
    return found


SESSIONS_ADMIN_METRICS_NETWORKS = _networks("SESSIONS_ADMIN_METRICS_NETWORKS")
# A load balancer probing plain http behind TLS termination is not redirected to https.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# One line per request and per action, each with its request id and operator
# (console/requestlog.py, console/logformat.py); SESSIONS_ADMIN_LOG_FORMAT=json writes one
# JSON object per line. Expected refusals (a 403) are that one line, without a traceback.
SESSIONS_ADMIN_LOG_FORMAT = os.environ.get("SESSIONS_ADMIN_LOG_FORMAT", "text").strip().lower()
if SESSIONS_ADMIN_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(
        f"SESSIONS_ADMIN_LOG_FORMAT must be text or json, not {SESSIONS_ADMIN_LOG_FORMAT!r}."
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_context": {"()": "sessions_admin.console.logformat.RequestContextFilter"},
        "expected_answers": {"()": "sessions_admin.console.logformat.ExpectedAnswerFilter"},
    },
    "formatters": {
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(operator)s] %(message)s"
        },
        "json": {"()": "sessions_admin.console.logformat.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_context", "expected_answers"],
            "formatter": SESSIONS_ADMIN_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("SESSIONS_ADMIN_LOG_LEVEL", "INFO")},
}
