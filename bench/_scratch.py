"""The settings a benchmark's scratch database runs with (imported by the scripts beside it)."""

from __future__ import annotations

import os

# What a benchmark's one user asks, faster than the per-user and per-session limits allow.
_RATE_LIMITS = (
    "RUNS_PER_USER",
    "RUNS_PER_SESSION",
    "SUPPLEMENTS_PER_USER",
    "SUPPLEMENTS_PER_SESSION",
)


def scratch_environment(database_url: str) -> None:
    """Point Django at `database_url` with throwaway keys and no per-user rate limits."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")
    # A scratch database, created and dropped by the benchmark: any keys do.
    os.environ.setdefault("SECRET_KEY", "bench-scratch-secret-key-0123456789abcdef")
    os.environ.setdefault("FIELD_ENCRYPTION_KEY", "bench-scratch-field-key-0123456789abcdef")
    for name in _RATE_LIMITS:
        os.environ.setdefault(f"RATE_LIMIT_{name}", "off")
