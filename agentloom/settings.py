"""Django settings, read from the environment (see README.md, "Configuration")."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from agentloom.config import (
    cache_from_url,
    database_from_url,
    database_identity,
    database_slots,
    env_bool,
    env_heartbeat,
    env_int,
    env_list,
    env_origin,
    env_rate,
    env_secret_list,
    env_str,
    local_secret,
    worker_processes,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("AGENTLOOM_VAR_DIR", str(BASE_DIR / "var")))

# Off unless asked for: `./dev run` turns it on for local use.
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = local_secret(VAR_DIR, "SECRET_KEY", debug=DEBUG)
# Older signing keys, still accepted (sessions, and values encrypted before the field keys alone
# protected them, until `manage.py convert_legacy_encryption` has rewritten those).
SECRET_KEY_FALLBACKS = env_secret_list("SECRET_KEY_FALLBACKS")
# Key of the encrypted columns (journal, checkpoints, views, API keys): encrypts and reads.
# Losing it loses the data. Older keys in the fallbacks are only read, until
# `manage.py rotate_encryption_key` has re-encrypted every column under the current key.
FIELD_ENCRYPTION_KEY = local_secret(VAR_DIR, "FIELD_ENCRYPTION_KEY", debug=DEBUG)
FIELD_ENCRYPTION_KEY_FALLBACKS = env_secret_list("FIELD_ENCRYPTION_KEY_FALLBACKS")
# Signs session exports so an import can tell this deployment's files from altered ones; unset,
# a key derived from the field keys signs (and a file signed under a fallback still verifies).
SESSION_EXPORT_KEY = env_str("SESSION_EXPORT_KEY", "") or ""
# The largest session export an import reads (bytes); a larger file is refused before parsing.
SESSION_IMPORT_MAX_BYTES = env_int("SESSION_IMPORT_MAX_BYTES", 256 * 1024 * 1024, minimum=1024)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Model endpoints on loopback or private networks (a local vLLM, an office proxy) are refused
# unless an operator opts in (`./dev run` does): they are how server-side request forgery starts.
ALLOW_PRIVATE_MODEL_HOSTS = env_bool("ALLOW_PRIVATE_MODEL_HOSTS", False)
# Tool servers (MCP) are a separate decision: a local model server does not vouch for local tools.
ALLOW_PRIVATE_TOOL_HOSTS = env_bool("ALLOW_PRIVATE_TOOL_HOSTS", False)
# Where people reach the console, as `https://host[:port]` (no path): OAuth tool servers send
# people back to `<origin>/oauth/callback/`, and a Client ID Metadata Document is served there
# only under https. Unset, the origin is the one each request came to (a host in ALLOWED_HOSTS)
# and tool servers' authorization servers get no metadata document (dynamic registration or a
# pre-registered client id instead).
CONSOLE_ORIGIN = env_origin("CONSOLE_ORIGIN")
# The longest one call of a tool-server tool may take (the lease is renewed while it runs).
TOOL_CALL_SECONDS = env_int("TOOL_CALL_SECONDS", 60, minimum=1)
LEGACY_CONTEXT_CHARS = env_int("LEGACY_CONTEXT_CHARS", 48_000, minimum=1_000)
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 120, minimum=2)
# While a model call or a tool runs, the worker renews its lease this often (never past the
# call's own deadline); the lease must outlive two intervals.
RUN_HEARTBEAT_SECONDS = env_heartbeat(RUN_LEASE_SECONDS)
# A queued run no worker picks up within this time is marked failed (worker_lost).
RUN_QUEUE_SECONDS = env_int("RUN_QUEUE_SECONDS", 600, minimum=5)
# Days after which the beat purges a session a space's retention rule hid (its journal and runs
# removed for good; the audit row stays).
RETENTION_PURGE_DAYS = env_int("RETENTION_PURGE_DAYS", 30, minimum=0)
# A run waiting for a person's approval of its tool calls ends `cancelled` after this long.
RUN_APPROVAL_SECONDS = env_int("RUN_APPROVAL_SECONDS", 86_400, minimum=1)
# How long a Redis broker waits for a delivered task's acknowledgement before it delivers the
# task again (see CELERY_BROKER_TRANSPORT_OPTIONS below).
BROKER_VISIBILITY_SECONDS = env_int(
    "BROKER_VISIBILITY_SECONDS", max(RUN_QUEUE_SECONDS // 2, 10), minimum=10
)
RUN_MAX_MODEL_CALLS = env_int("RUN_MAX_MODEL_CALLS", 32, minimum=1)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "agentloom.spaces",
    "models_app",
    "context_app",
    "sessions_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Content-Security-Policy on every answer, no-store for signed-in users (agentloom/security.py).
    "agentloom.security.SecurityHeadersMiddleware",
    # Last, as django-axes requires: answers a locked-out login attempt.
    "axes.middleware.AxesMiddleware",
]

# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT failed logins for one user name from
# one address, that pair is locked out for LOGIN_LOCKOUT_MINUTES (console and admin forms alike).
AUTHENTICATION_BACKENDS = [
    "agentloom.security.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

ROOT_URLCONF = "agentloom.urls"
WSGI_APPLICATION = "agentloom.wsgi.application"
ASGI_APPLICATION = "agentloom.asgi.application"

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
            ],
        },
    },
]

# PostgreSQL: each process's connection pool (0: no pool, a connection per thread kept 60 s).
DATABASE_POOL_SIZE = env_int("DATABASE_POOL_SIZE", 10, minimum=0)
DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'agentloom.sqlite3'}"),
        pool_size=DATABASE_POOL_SIZE,
    )
}
_SQLITE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
if _SQLITE:
    # Tests that start a worker process need a file both processes can open.
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_SQLITE_NAME")}
# How many of a worker process's runs use the database at once (sessions_app/services/slots.py):
# one on SQLite, one less than the pool on PostgreSQL (the lease renewer keeps the last one).
RUN_DATABASE_SLOTS = database_slots(
    _SQLITE, DATABASE_POOL_SIZE, env_int("RUN_DATABASE_SLOTS", 0, minimum=0)
)
# Worker processes one machine runs (`python -m agentloom.work`), each with its own pool of
# DATABASE_POOL_SIZE, RUN_DATABASE_SLOTS and lease renewer: one per core on PostgreSQL (a process
# runs one Python thread at a time), one on SQLite. Each holds WORKER_CONCURRENCY runs in flight.
WORKER_PROCESSES = worker_processes(_SQLITE, env_int("WORKER_PROCESSES", 0, minimum=1))
WORKER_CONCURRENCY = env_int("WORKER_CONCURRENCY", 200, minimum=1)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Shared by every process (rate-limit counters) when it points at Redis; per process otherwise.
CACHES = cache_from_url(env_str("CACHE_URL"))
# Rate limits of the costly actions, per user and per session (agentloom/ratelimit.py).
RATE_LIMITS = {
    "discovery": env_rate("RATE_LIMIT_DISCOVERY", "20/minute"),
    "runs_per_user": env_rate("RATE_LIMIT_RUNS_PER_USER", "30/minute"),
    "runs_per_session": env_rate("RATE_LIMIT_RUNS_PER_SESSION", "10/minute"),
    "supplements_per_user": env_rate("RATE_LIMIT_SUPPLEMENTS_PER_USER", "60/minute"),
    "supplements_per_session": env_rate("RATE_LIMIT_SUPPLEMENTS_PER_SESSION", "20/minute"),
}
# Events streams (`GET /api/v1/runs/{id}/events`) one user holds open at once, counted in the
# cache with a lease per stream (agentloom/ratelimit.py).
EVENT_STREAMS_PER_USER = env_int("EVENT_STREAMS_PER_USER", 10, minimum=1)

# OpenTelemetry traces (agentloom/tracing.py): off unless an OTLP/HTTP endpoint is named, by the
# standard variables (the traces one whole, or the base one with /v1/traces added).
_OTLP_BASE = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "") or ""
TRACES_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "") or (
    _OTLP_BASE.rstrip("/") + "/v1/traces" if _OTLP_BASE else ""
)

# Prometheus metrics at /metrics (agentloom/metrics.py): off without a token. With one, every
# process writes its counts under METRICS_DIR (prometheus_client's multiprocess mode, chosen when
# it is first imported, so it is set here) and a scrape must send `Authorization: Bearer <token>`.
METRICS_TOKEN = env_str("METRICS_TOKEN", "") or ""
METRICS_DIR = Path(env_str("METRICS_DIR", str(VAR_DIR / "metrics")))
if METRICS_TOKEN:
    if len(METRICS_TOKEN) < 16:
        raise ImproperlyConfigured("METRICS_TOKEN must be at least 16 characters")
    METRICS_DIR.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(METRICS_DIR))

# Web server processes `python -m agentloom.serve` starts (agentloom/serve.py).
WEB_WORKERS = env_int("WEB_WORKERS", 2, minimum=1)

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# A request body above this size is refused before any view parses it.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 2 * 1024 * 1024, minimum=1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Keys are stored as digests, can expire and be revoked
        # (agentloom/spaces/services/tokens.py); a client's key is looked up by its digest.
        "agentloom.spaces.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only, and never nested deep enough to exhaust the parser (agentloom/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["agentloom.parsers.ApiJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # Application errors, Django's 404s and oversized bodies become clean JSON (agentloom/api.py).
    "EXCEPTION_HANDLER": "agentloom.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "AgentLoom API",
    "DESCRIPTION": "Agents, sessions with an encrypted journal, managed context.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Tags come from the path after /api/ or /api/v1/: spaces, agents, sessions, runs, …
    "SCHEMA_PATH_PREFIX": r"/api(/v[0-9]+)?",
}

# Celery: the filesystem transport needs no server, so one machine runs web + worker on SQLite.
# Real deployments set CELERY_BROKER_URL=redis://host:6379/0. Its folders are made when the
# Celery app is first configured (agentloom/celery.py), never by importing these settings.
_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "in"),
        "data_folder_out": str(_BROKER_DIR / "in"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        # Remote-control exchanges; kombu's default is a folder relative to the working dir.
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Redis holds each delivered task in `unacked` until its worker acknowledges it, at the end
    # of the run (late acks), and puts it back on the queue after this many seconds otherwise.
    # A task whose worker died before claiming its run comes back this way: well before
    # RUN_QUEUE_SECONDS, when the sweep would fail the still-queued run. A task of a run that is
    # still running, or has ended, comes back to nothing (the lease refuses the claim), so a
    # run longer than this costs one idle redelivery; a run whose worker died fails after
    # RUN_LEASE_SECONDS whatever this is.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": BROKER_VISIBILITY_SECONDS}
elif not CELERY_BROKER_URL.startswith("amqp://"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL must start with filesystem://, redis://, rediss:// or amqp://, "
        f"got {CELERY_BROKER_URL.split('://', 1)[0]!r}"
    )
# Every task carries the name of this deployment's database, and goes to (and is consumed from)
# this deployment's own queue: two deployments sharing a Redis database never take each other's
# runs (a worker that gets one anyway hands it back, sessions_app/tasks.py).
DEPLOYMENT_ID = database_identity(DATABASES["default"])
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", f"agentloom-{DEPLOYMENT_ID}")
# Live deltas of streamed model calls (sessions_app.services.live): `database` (the embedded
# default, one machine) or a redis:// URL (many web and worker processes). Unset: the Celery
# broker when it is Redis, else the database. Deltas are encrypted and kept LIVE_DELTA_SECONDS.
LIVE_CHANNEL_URL = env_str("LIVE_CHANNEL_URL", "") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else "database"
)
if LIVE_CHANNEL_URL != "database" and not LIVE_CHANNEL_URL.startswith(("redis://", "rediss://")):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("LIVE_CHANNEL_URL must be `database` or a redis:// URL")
LIVE_DELTA_SECONDS = env_int("LIVE_DELTA_SECONDS", 600, minimum=10)
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "sweep-expired-run-leases": {
        "task": "sessions_app.tasks.sweep_expired_leases",
        "schedule": 30.0,
    },
    "apply-retention-rules": {
        "task": "sessions_app.tasks.apply_retention",
        "schedule": 3600.0,
    },
    "discard-stale-imports": {
        "task": "sessions_app.tasks.discard_stale_imports",
        "schedule": 3600.0,
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
