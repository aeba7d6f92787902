"""Read settings from the environment, failing loudly on malformed values.

Each reader raises `ImproperlyConfigured` naming the variable, so that a typo stops start-up
instead of silently running with a default.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def env_float(name: str, default: float) -> float:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise ImproperlyConfigured(f"{name} must be a positive number, got {value!r}")
    return number


def lease_problem(lease_seconds: float, heartbeat_seconds: float) -> str | None:
    """Return why a lease and its heartbeat interval do not work together (None when they do).

    A worker renews its lease every heartbeat interval while a model call or tool runs; the lease
    must outlive two intervals, so one late renewal (a slow database) does not lose it.
    """
    if not heartbeat_seconds > 0:
        return f"RUN_HEARTBEAT_SECONDS must be positive, got {heartbeat_seconds}"
    if lease_seconds < 2 * heartbeat_seconds:
        return (
            f"RUN_LEASE_SECONDS ({lease_seconds}) must be at least twice RUN_HEARTBEAT_SECONDS "
            f"({heartbeat_seconds}): a lease that cannot outlive the heartbeat interval is lost "
            "while a healthy run waits for a model or a tool"
        )
    return None


def env_heartbeat(lease_seconds: int) -> float:
    """Return RUN_HEARTBEAT_SECONDS (default: a quarter of the lease), refusing a bad pair."""
    heartbeat = env_float("RUN_HEARTBEAT_SECONDS", lease_seconds / 4)
    problem = lease_problem(lease_seconds, heartbeat)
    if problem:
        raise ImproperlyConfigured(problem)
    return heartbeat


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_origin(name: str) -> str:
    """Return an origin (`http(s)://host[:port]`, no path, query or user) or "" when unset."""
    value = env_str(name)
    if value is None:
        return ""
    parts = urlsplit(value)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ImproperlyConfigured(f"{name} must be an origin such as https://host, got {value!r}")
    try:
        parts.port  # noqa: B018 (a malformed port raises)
    except ValueError:
        raise ImproperlyConfigured(f"{name} has a malformed port, got {value!r}") from None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def env_secret_list(name: str) -> list[str]:
    """Return the comma-separated older keys in `name`, each at least 32 characters long."""
    values = env_list(name, [])
    for position, value in enumerate(values, start=1):
        if len(value) < 32:
            raise ImproperlyConfigured(
                f"{name}: key {position} must be at least 32 characters long"
            )
    return values


def database_from_url(url: str, *, sqlite_timeout: int = 20, pool_size: int = 0) -> dict:
    """Return a DATABASES entry for `url` (sqlite:///path or postgres://…).

    On PostgreSQL, `pool_size` > 0 gives each process a connection pool of at most that many
    connections (psycopg's pool); a thread that closes its connection hands it back.
    """
    import dj_database_url

    if "://" not in url:
        raise ImproperlyConfigured(
            "DATABASE_URL must look like sqlite:///path or postgres://user@host:port/name, "
            f"got {url!r}"
        )
    scheme = url.split("://", 1)[0]
    if scheme not in {"sqlite", "postgres", "postgresql", "pgsql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL scheme {scheme!r} is not supported (use sqlite or postgres)"
        )
    try:
        config = dj_database_url.parse(url)
    except Exception as error:  # the parser raises several types for garbage
        raise ImproperlyConfigured(f"DATABASE_URL could not be parsed: {error}") from None
    if config["ENGINE"] == "django.db.backends.sqlite3":
        if config.get("NAME") in (None, "", ":memory:"):
            # An in-memory database cannot be shared by the web process and the worker.
            raise ImproperlyConfigured("DATABASE_URL names no SQLite file (sqlite:///path)")
        # WAL lets the web process read while a worker writes; IMMEDIATE takes the write lock
        # at BEGIN so two writers queue on the timeout instead of failing mid-transaction.
        config["OPTIONS"] = {
            "timeout": sqlite_timeout,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    else:
        if not config.get("NAME"):
            raise ImproperlyConfigured("DATABASE_URL names no PostgreSQL database")
        config["CONN_HEALTH_CHECKS"] = True
        if pool_size > 0:
            # A pooled connection is handed back when a request or a run's database work ends.
            config["CONN_MAX_AGE"] = 0
            config.setdefault("OPTIONS", {})["pool"] = {
                "min_size": 1,
                "max_size": pool_size,
                "timeout": 30,
            }
        else:
            config.setdefault("CONN_MAX_AGE", 60)
    return config


def database_identity(database: dict) -> str:
    """Return a short name of the database a deployment keeps its data in (no credentials).

    It is the same in every process of one deployment (web, workers, beat) and differs between
    deployments on different databases: tasks carry it, and the default queue is named after it.
    """
    import hashlib

    if database["ENGINE"] == "django.db.backends.sqlite3":
        where = str(Path(str(database["NAME"])).resolve())
    else:
        where = f"{database.get('HOST') or ''}:{database.get('PORT') or 5432}/{database['NAME']}"
    return hashlib.sha256(f"{database['ENGINE']}|{where}".encode()).hexdigest()[:12]


def database_slots(sqlite: bool, pool_size: int, asked: int) -> int:
    """Return a worker process's database slots: `asked`, or the default for the database."""
    if sqlite:
        return asked or 1
    if pool_size == 1:
        raise ImproperlyConfigured(
            "DATABASE_POOL_SIZE must be 0 (no pool) or at least 2: a worker's runs and its "
            "lease renewer each need a connection"
        )
    if pool_size and asked >= pool_size:
        raise ImproperlyConfigured(
            f"RUN_DATABASE_SLOTS ({asked}) must be below DATABASE_POOL_SIZE ({pool_size}): "
            "the lease renewer needs a connection of its own"
        )
    if asked:
        return asked
    return max(1, pool_size - 1) if pool_size else 9


def machine_cores() -> int:
    """Return the cores this process may run on (its CPU affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def worker_processes(sqlite: bool, asked: int) -> int:
    """Return how many worker processes one machine runs: `asked` (0: not set), else one per
    core on PostgreSQL; always one on SQLite, which takes one writer at a time."""
    if sqlite:
        if asked > 1:
            raise ImproperlyConfigured(
                f"WORKER_PROCESSES must be 1 on SQLite, got {asked}: SQLite takes one writer "
                "at a time (use PostgreSQL for several worker processes)"
            )
        return 1
    return asked or machine_cores()


def env_rate(name: str, default: str):
    """Return the rate limit `name` sets ("N/minute", "N/hour", "N/second", or "off")."""
    from agentloom.ratelimit import parse_rate

    value = env_str(name, default)
    try:
        return parse_rate(value)
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}, got {value!r}") from None


def cache_from_url(url: str | None) -> dict:
    """Return Django's CACHES for `url`: Redis (shared by every process) or per-process memory."""
    if not url or url == "locmem://":
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    if not url.startswith(("redis://", "rediss://")):
        raise ImproperlyConfigured(
            f"CACHE_URL must start with redis://, rediss:// or locmem://, got "
            f"{url.split('://', 1)[0]!r}"
        )
    return {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}}


def local_secret(var_dir: Path, name: str, *, debug: bool) -> str:
    """Return the secret `name` from the environment, or a generated one kept under var/.

    Generation happens only in development (DEBUG on) and only into an existing folder; with
    DEBUG off a missing secret is an error, because a fresh random key would make every
    encrypted row unreadable.
    """
    value = env_str(name)
    if value is not None:
        if len(value) < 32:
            raise ImproperlyConfigured(f"{name} must be at least 32 characters long")
        return value
    if not debug:
        raise ImproperlyConfigured(f"{name} must be set when DEBUG is off")
    path = var_dir / "local-secrets.json"
    stored: dict[str, str] = {}
    if path.exists():
        stored = json.loads(path.read_text())
    if name not in stored:
        if not var_dir.is_dir():
            # Reading settings creates no folders; `./dev run` makes this one.
            raise ImproperlyConfigured(
                f"{name} is not set and AGENTLOOM_VAR_DIR ({var_dir}) does not exist to keep "
                "a generated development key: create it or set the key"
            )
        stored[name] = secrets.token_urlsafe(48)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stored, indent=2))
        tmp.chmod(0o600)
        tmp.replace(path)
    return stored[name]
