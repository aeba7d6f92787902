"""System checks of the model manifest: `manage.py check` names entries verified too long ago."""

from __future__ import annotations

import datetime

from django.core import checks

from agentloom.providers import MANIFEST_MAX_AGE_DAYS, Manifest, load_manifest

STALE_MANIFEST = "models_app.W001"


def today() -> datetime.date:
    """Return the date the check measures ages against (tests replace it)."""
    return datetime.date.today()


def stale_manifest_warnings(
    manifest: Manifest | None = None, *, on: datetime.date | None = None
) -> list[checks.CheckMessage]:
    """Return one warning listing every manifest entry verified over 180 days ago."""
    stale = (manifest or load_manifest()).stale(on or today())
    if not stale:
        return []
    listing = ", ".join(
        f"{entry.provider}/{entry.model_id} (verified {entry.verified_on})" for entry in stale
    )
    return [
        checks.Warning(
            f"{len(stale)} model manifest entries were verified more than "
            f"{MANIFEST_MAX_AGE_DAYS} days ago: {listing}.",
            hint="Check their windows and prices against the source pages and update "
            "agentloom/providers/manifest.json.",
            id=STALE_MANIFEST,
        )
    ]


@checks.register()
def manifest_freshness(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    return stale_manifest_warnings()
