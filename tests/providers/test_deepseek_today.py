"""DeepSeek of today: thinking settings as documented, retired IDs on the official endpoint only,
cache hits from its usage, and prices by the time of day under a dated schedule."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from pathlib import Path

import pytest

from agentloom.engine import ModelRequest, cached_prompt_tokens
from agentloom.providers import (
    DeepSeekChatGateway,
    ModelEndpoint,
    discover_models,
    load_manifest,
    retirement_of,
)
from agentloom.providers.manifest import MANIFEST_PATH
from agentloom.providers.pricing import price_in_force
from tests.providers.test_discovery import through_double

KEY = "sk-test-deepseek-today"
OFFICIAL = "https://api.deepseek.com"
PROXY = "https://llm-proxy.example.com/v1"
BEIJING = datetime.timezone(datetime.timedelta(hours=8))


def ask():
    return ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])


def deepseek(**options):
    return DeepSeekChatGateway(ModelEndpoint(OFFICIAL, KEY, "deepseek-flash"), **options)


# --- 1. thinking settings ---------------------------------------------------------------------


def test_thinking_and_effort_are_sent_as_deepseek_documents_them():
    body = deepseek(thinking="enabled", reasoning_effort="max").payload(ask())
    assert body["thinking"] == {"type": "enabled"}
    assert body["reasoning_effort"] == "max"
    body = deepseek(thinking="disabled").payload(ask())
    assert body["thinking"] == {"type": "disabled"}
    assert "reasoning_effort" not in body
    body = deepseek().payload(ask())
    assert "thinking" not in body and "reasoning_effort" not in body


@pytest.mark.parametrize(
    ("thinking", "effort"), [("sometimes", None), (None, "medium"), ("disabled", "low")]
)
def test_settings_deepseek_does_not_document_are_refused(thinking, effort):
    with pytest.raises(ValueError):
        deepseek(thinking=thinking, reasoning_effort=effort)


@pytest.mark.parametrize(
    ("thinking", "sent"), [(None, False), ("enabled", False), ("disabled", True)]
)
def test_parameters_thinking_mode_ignores_are_not_sent(monkeypatch, thinking, sent):
    tuned = {"temperature": 0.2, "presence_penalty": 0.5, "frequency_penalty": 0.5}
    # The provider's settings are applied to a body that holds them.
    plain = DeepSeekChatGateway.with_settings
    monkeypatch.setattr(
        DeepSeekChatGateway, "with_settings", lambda self, body: plain(self, body | tuned)
    )
    body = deepseek(thinking=thinking).payload(ask())
    for name in tuned:
        assert (name in body) is sent


def test_every_call_purpose_gets_the_same_settings():
    chat = deepseek(thinking="enabled", reasoning_effort="low")
    for purpose in ("action", "compaction", "verification"):
        request = ModelRequest(purpose=purpose, messages=[{"role": "user", "content": "x"}])
        body = chat.payload(request)
        assert (body["thinking"], body["reasoning_effort"]) == ({"type": "enabled"}, "low")


# --- 4. DeepSeek of today ---------------------------------------------------------------------


def test_the_manifest_lists_todays_models_with_sources():
    manifest = load_manifest()
    for model_id in ("deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"):
        entry = manifest.lookup("deepseek", model_id)
        assert (entry.context_window, entry.max_output_cap) == (1_000_000, 384_000)
        assert entry.source_url == "https://api-docs.deepseek.com/quick_start/pricing"
        assert entry.verified_on == "2026-12-01" and entry.retirement() is None
        assert entry.price_periods and entry.prices is None
    assert "legacy name" in manifest.lookup("deepseek", "deepseek-v4-flash").note
    for model_id in ("deepseek-chat", "deepseek-reasoner"):
        retirement = manifest.lookup("deepseek", model_id).retirement()
        assert retirement.retired_on == "2026-07-24"
        assert retirement.replacement.startswith("deepseek-flash")


def test_discovery_marks_retired_ids_on_the_official_endpoint_only(provider_double):
    provider_double.models = [
        {"id": "deepseek-chat", "object": "model"},
        {"id": "deepseek-flash", "object": "model"},
    ]
    official = {
        model.id: model
        for model in discover_models(
            "deepseek", OFFICIAL, KEY, client_factory=through_double(provider_double)
        )
    }
    assert official["deepseek-chat"].retired == {
        "retired_on": "2026-07-24",
        "replacement": "deepseek-flash (thinking disabled)",
        "source_url": "https://api-docs.deepseek.com/quick_start/pricing",
    }
    assert official["deepseek-flash"].retired is None
    for provider in ("deepseek", "openai_compatible"):
        proxied = discover_models(provider, provider_double.base_url, KEY, allow_private_hosts=True)
        assert all(model.retired is None for model in proxied)


def test_a_retirement_applies_after_its_day_and_on_the_official_endpoint():
    day = datetime.date(2026, 7, 24)
    assert retirement_of("deepseek", OFFICIAL, "deepseek-chat", today=day) is None
    later = retirement_of("deepseek", OFFICIAL, "deepseek-chat", today=day.replace(day=25))
    assert "choose deepseek-flash (thinking disabled)" in later.message("DeepSeek")
    assert retirement_of("deepseek", PROXY, "deepseek-chat") is None
    assert retirement_of("openai_compatible", PROXY, "deepseek-reasoner") is None


def test_cache_hits_are_read_from_deepseeks_usage():
    usage = {
        "prompt_tokens": 1_200,
        "completion_tokens": 30,
        "prompt_cache_hit_tokens": 1_024,
        "prompt_cache_miss_tokens": 176,
    }
    assert cached_prompt_tokens(usage) == 1_024


# --- 5. prices by the time of day -------------------------------------------------------------


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=BEIJING)


def flash_price(when: datetime.datetime, manifest=None):
    return price_in_force("deepseek", OFFICIAL, "deepseek-flash", at=when, manifest=manifest)


@pytest.mark.parametrize(
    ("when", "band"),
    [
        ("2026-12-01 10:00", "peak"),  # a Tuesday morning in Beijing
        ("2026-12-01 15:30", "peak"),
        ("2026-12-01 12:30", "off_peak"),  # lunch hours
        ("2026-12-01 20:00", "off_peak"),
        ("2026-12-05 10:00", "off_peak"),  # a Saturday
        ("2026-12-06 15:00", "off_peak"),  # a Sunday
        ("2026-12-01 09:00", "peak"),  # a window's first instant is inside it
        ("2026-12-01 08:59:59.999999", "off_peak"),
        ("2026-12-01 11:59:59.999999", "peak"),
        ("2026-12-01 12:00", "off_peak"),  # its last instant is not
        ("2026-12-01 18:00", "off_peak"),
    ],
)
def test_the_band_is_decided_in_beijing_time(when, band):
    price = flash_price(at(when))
    assert price.band == band
    expected = {"peak": ("0.3", "0.006", "1.2"), "off_peak": ("0.15", "0.003", "0.6")}[band]
    assert (price.prices.input, price.prices.cached_input, price.prices.output) == tuple(
        Decimal(value) for value in expected
    )
    assert price.source_url == "https://api-docs.deepseek.com/quick_start/pricing"


def test_the_band_follows_the_instant_not_the_servers_clock():
    # 02:00 UTC on a Tuesday is 10:00 in Beijing: peak.
    utc = datetime.datetime(2026, 12, 1, 2, 0, tzinfo=datetime.UTC)
    assert flash_price(utc).band == "peak"
    assert flash_price(utc.replace(hour=4, minute=30)).band == "off_peak"


def test_what_the_schedule_cannot_decide_has_no_price():
    # Before the first rule the manifest confirms, and in a year the holiday list lacks.
    assert flash_price(at("2026-10-20 10:00")) is None
    assert flash_price(at("2027-01-05 10:00")) is None
    assert price_in_force("deepseek", OFFICIAL, "deepseek-flash") is None  # no instant
    # A proxy serving the same ID bills its own way.
    assert price_in_force("deepseek", PROXY, "deepseek-flash", at=at("2026-12-01 10:00")) is None


@pytest.fixture
def year_manifest(tmp_path) -> Path:
    """The bundled manifest with a rule history over 2026: every day, then working days."""
    document = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    schedule = document["price_schedules"]["deepseek-peak-hours"]
    weekdays = schedule["rules"][0]
    every_day = {
        "from": "2026-08-16T16:00:00+00:00",
        "time_zone": "UTC",
        "peak_weekdays": [1, 2, 3, 4, 5, 6, 7],
        "peak_hours": [["01:00", "04:00"], ["06:00", "10:00"]],
    }
    schedule["rules"] = [every_day, weekdays]
    for period in document["models"]["deepseek"]["deepseek-flash"]["price_periods"]:
        period["from"] = "2026-08-16T16:00:00+00:00"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_the_rule_in_force_at_the_calls_start_decides(year_manifest):
    manifest = load_manifest(year_manifest)
    # Before peak billing began: no rule, no price.
    assert flash_price(at("2026-08-16 10:00"), manifest) is None
    # A Saturday at 10:00 Beijing (02:00 UTC) under the every-day rule, then the weekday rule.
    assert flash_price(at("2026-08-22 10:00"), manifest).band == "peak"
    assert flash_price(at("2026-11-21 10:00"), manifest).band == "off_peak"
    # The first instant of the weekday rule is judged by it.
    assert flash_price(at("2026-11-15 00:00"), manifest).band == "off_peak"


def test_public_holidays_are_off_peak_all_day(year_manifest):
    manifest = load_manifest(year_manifest)
    # Thursday 2026-10-01, National Day, under the every-day rule, which knew no holidays.
    assert flash_price(at("2026-10-01 10:00"), manifest).band == "peak"
    # Under the weekday rule moved back before the holidays: a public holiday is off-peak all
    # day, the next working day is not, and a weekend day worked in exchange stays off-peak.
    document = json.loads(year_manifest.read_text(encoding="utf-8"))
    rules = document["price_schedules"]["deepseek-peak-hours"]["rules"]
    rules[1]["from"] = "2026-09-30T00:00:00+08:00"
    year_manifest.write_text(json.dumps(document), encoding="utf-8")
    manifest = load_manifest(year_manifest)
    assert flash_price(at("2026-10-01 10:00"), manifest).band == "off_peak"
    assert flash_price(at("2026-10-07 15:00"), manifest).band == "off_peak"
    assert flash_price(at("2026-10-08 10:00"), manifest).band == "peak"
    assert flash_price(at("2026-10-10 10:00"), manifest).band == "off_peak"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["calendars"]["cn-public-holidays"]["years"].update(
                {"2026": ["2027-01-01"]}
            ),
            "that year",
        ),
        (
            lambda d: d["price_schedules"]["deepseek-peak-hours"]["rules"][0].update(
                time_zone="Mars/Base"
            ),
            "time zone",
        ),
        (
            lambda d: d["price_schedules"]["deepseek-peak-hours"]["rules"][0].update(
                peak_hours=[["12:00", "09:00"]]
            ),
            "ends after",
        ),
        (
            lambda d: d["price_schedules"]["deepseek-peak-hours"]["rules"][0].update(
                {"from": "2026-11-15T00:00:00"}
            ),
            "UTC offset",
        ),
        (
            lambda d: d["models"]["deepseek"]["deepseek-flash"]["price_periods"][0].update(
                schedule="x"
            ),
            "unknown schedule",
        ),
        (lambda d: d["models"]["deepseek"]["deepseek-chat"].pop("replacement"), "replacement"),
    ],
)
def test_a_malformed_schedule_is_refused(tmp_path, change, message):
    document = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    change(document)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_manifest(path)
