"""The manifest's exact-ID entries, their prices and ages, and what a call costs at them."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal

import pytest

from agentloom.providers import model_defaults
from agentloom.providers.manifest import MANIFEST_PATH, Prices, load_manifest
from agentloom.providers.pricing import call_cost, price_in_force

DEEPSEEK = "https://api.deepseek.com"
OPENAI = "https://api.openai.com/v1"
GPT_54 = Prices("USD", Decimal("2.50"), Decimal("0.25"), Decimal("15.00"), 272_000)


@pytest.mark.parametrize(
    "model_id", ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-flash", "deepseek-chat"]
)
def test_deepseek_v4_models_and_aliases_have_the_published_window(model_id):
    model = model_defaults("deepseek", DEEPSEEK, model_id)
    assert (model.context_window, model.max_output_cap, model.window_source) == (
        1_000_000,
        384_000,
        "official_manifest",
    )
    assert model.source_url == "https://api-docs.deepseek.com/quick_start/pricing"
    assert model.estimator == "deepseek"


def test_the_aliases_resolve_to_their_own_entries_with_the_archived_date():
    manifest = load_manifest()
    for alias in ("deepseek-chat", "deepseek-reasoner"):
        entry = manifest.lookup("deepseek", alias)
        assert entry.verified_on == "2026-04-26"
        assert "deepseek-v4-flash" in entry.note


@pytest.mark.parametrize(
    ("provider", "base_url", "model_id"),
    [
        ("deepseek", DEEPSEEK, "deepseek-v4-flash-0731"),
        ("deepseek", DEEPSEEK, "DeepSeek-V4-Flash"),
        ("deepseek", DEEPSEEK, "deepseek-v4"),
        ("openai", OPENAI, "gpt-5.4-2026-03-05"),
        ("openai", OPENAI, "gpt-5.4-mini"),
        ("openai", OPENAI, "gpt-5.45"),
    ],
)
def test_a_near_miss_id_gets_the_fallback(provider, base_url, model_id):
    model = model_defaults(provider, base_url, model_id)
    assert (model.window_source, model.context_window) == ("platform_default", 32_768)
    assert price_in_force(provider, base_url, model_id) is None


def test_openai_entries_carry_the_page_prices():
    price = price_in_force("openai", OPENAI, "gpt-5.4")
    assert price.prices == GPT_54
    assert price.source_url == "https://developers.openai.com/api/docs/models/gpt-5.4"
    assert price.verified_on == "2026-11-30"
    assert price_in_force("openai", OPENAI, "gpt-4").prices.cached_input is None


def test_prices_apply_only_on_the_official_endpoint():
    assert price_in_force("openai_compatible", "https://proxy.example/v1", "gpt-5.4") is None
    assert price_in_force("openai", "https://proxy.example/v1", "gpt-5.4") is None


def test_deepseek_prices_are_unknown_since_they_depend_on_the_hour():
    for model_id in ("deepseek-v4-flash", "deepseek-v4-pro", "deepseek-chat"):
        assert load_manifest().lookup("deepseek", model_id).prices is None
        assert price_in_force("deepseek", DEEPSEEK, model_id) is None


def test_every_chat_entry_has_a_source_date_and_tokenizer():
    for entry in load_manifest().entries.values():
        datetime.date.fromisoformat(entry.verified_on)
        assert entry.source_url.startswith("https://")
        if entry.chat:
            assert entry.tokenizer in ("o200k", "cl100k", "deepseek")


# --- cost arithmetic ---------------------------------------------------------------------------


def test_cost_without_cached_tokens():
    cost = call_cost(GPT_54, prompt_tokens=10_000, cached_tokens=None, completion_tokens=2_000)
    # 10,000 x 2.50 / 1M + 2,000 x 15.00 / 1M
    assert cost == Decimal("0.025") + Decimal("0.03")


def test_cached_input_is_priced_apart():
    cost = call_cost(GPT_54, prompt_tokens=10_000, cached_tokens=8_000, completion_tokens=2_000)
    # 2,000 uncached x 2.50 + 8,000 cached x 0.25 + 2,000 output x 15.00, per million
    assert cost == Decimal("0.005") + Decimal("0.002") + Decimal("0.03")


def test_cost_is_exact_decimal():
    nano = Prices("USD", Decimal("0.05"), Decimal("0.005"), Decimal("0.40"))
    cost = call_cost(nano, prompt_tokens=3, cached_tokens=1, completion_tokens=7)
    # 2 uncached x 0.05 + 1 cached x 0.005 + 7 output x 0.40, per million
    assert cost == Decimal("0.000002905")


@pytest.mark.parametrize(
    ("prices", "usage"),
    [
        (None, (100, 0, 10)),
        (GPT_54, (None, 0, 10)),
        (GPT_54, (100, 0, None)),
        (GPT_54, (100, 200, 10)),
        (GPT_54, (272_001, 0, 10)),
        (Prices("USD", Decimal("30"), None, Decimal("60")), (100, 50, 10)),
    ],
    ids=[
        "no-price",
        "no-prompt-usage",
        "no-completion-usage",
        "more-cached-than-prompt",
        "above-the-priced-prompt-size",
        "cached-without-a-cached-price",
    ],
)
def test_no_cost_when_anything_is_missing(prices, usage):
    prompt, cached, completion = usage
    assert (
        call_cost(prices, prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion)
        is None
    )


def test_no_cached_price_is_fine_without_cached_tokens():
    gpt4 = Prices("USD", Decimal("30"), None, Decimal("60"))
    assert call_cost(gpt4, prompt_tokens=1_000, cached_tokens=0, completion_tokens=0) == Decimal(
        "0.03"
    )


# --- the manifest file's rules -----------------------------------------------------------------


def _with_prices(tmp_path, prices):
    document = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    document["models"]["openai"]["gpt-5.4"]["prices"] = prices
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "prices",
    [
        {"currency": "USD", "input": 2.5, "cached_input": "0.25", "output": "15"},
        {"currency": "USD", "input": "-1", "cached_input": None, "output": "15"},
        {"currency": "usd", "input": "1", "cached_input": None, "output": "15"},
        {"currency": "USD", "input": "1", "output": "NaN"},
        {"currency": "USD", "input": "1", "output": "2", "surcharge": "3"},
        "2.50",
    ],
)
def test_malformed_prices_are_refused(tmp_path, prices):
    with pytest.raises(ValueError, match=r"gpt-5\.4: prices"):
        load_manifest(_with_prices(tmp_path, prices))


def test_entries_older_than_180_days_are_stale():
    manifest = load_manifest()
    assert manifest.stale(datetime.date(2027, 5, 29)) == []  # 180 days after 2026-11-30
    stale = manifest.stale(datetime.date(2027, 5, 30))
    assert stale and {entry.verified_on for entry in stale} == {"2026-11-30"}
    # Retired models are history: never reported, however old.
    retired = {key for key, entry in manifest.entries.items() if entry.retired_on is not None}
    assert retired == {("deepseek", "deepseek-chat"), ("deepseek", "deepseek-reasoner")}
    assert len(manifest.stale(datetime.date(2028, 6, 1))) == len(manifest.entries) - len(retired)
