"""Each model call copies the price in force; run, session and API show costs, never guesses."""

from __future__ import annotations

import datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest

from agentloom.engine import ModelGateway
from agentloom.engine.testing import text_response
from agentloom.providers.manifest import Prices
from agentloom.providers.pricing import PriceInForce
from context_app import engine_adapter
from sessions_app.models import ModelCall
from sessions_app.selectors.costs import cached_share_by_run, run_cost, session_cost
from sessions_app.services import execution
from tests.api.factories import client_for
from tests.factories import ask, make_connection

pytestmark = pytest.mark.django_db

PRICE = PriceInForce(
    Prices("USD", Decimal("2.50"), Decimal("0.25"), Decimal("15.00"), 272_000),
    "https://developers.openai.com/api/docs/models/gpt-5.4",
    "2026-11-30",
)
USAGE = {
    "prompt_tokens": 10_000,
    "completion_tokens": 2_000,
    "prompt_tokens_details": {"cached_tokens": 8_000},
}
# 2,000 x 2.50 + 8,000 x 0.25 + 2,000 x 15.00, per million tokens
CALL_COST = Decimal("0.037")


class UsageGateway(ModelGateway):
    provider, model_id = "double", "local-demo"

    def complete(self, request):
        return text_response("done", usage=USAGE)


@pytest.fixture
def priced(monkeypatch):
    engine_adapter.set_gateway_factory(lambda version, connection: UsageGateway())
    monkeypatch.setattr(execution, "price_for", lambda version, at=None, **read: PRICE)
    yield
    engine_adapter.set_gateway_factory(None)


def test_a_call_copies_the_price_in_force_and_costs_from_its_usage(
    alice, make_demo_session, priced
):
    run = ask(make_demo_session(), alice, "hello")
    call = ModelCall.objects.get(run=run)
    assert (call.price_currency, call.price_input, call.price_cached_input) == (
        "USD",
        Decimal("2.50"),
        Decimal("0.25"),
    )
    assert call.price_verified_on == datetime.date(2026, 11, 30)
    assert call.reported_completion_tokens == 2_000
    assert call.cost == CALL_COST


def test_a_later_price_change_never_rewrites_a_past_call(alice, make_demo_session, priced):
    run = ask(make_demo_session(), alice, "hello")
    execution.price_for = lambda version, at=None, **read: (
        None
    )  # the manifest drops the price (monkeypatched)
    assert ModelCall.objects.get(run=run).cost == CALL_COST


def test_run_and_session_costs_count_every_call(alice, make_demo_session, priced):
    session = make_demo_session()
    first = ask(session, alice, "one")
    ask(session, alice, "two")
    # A call whose answer was discarded (lease lost) was still billed, and still counts.
    ModelCall.objects.create(
        run=first,
        purpose="action",
        reported_prompt_tokens=1_000,
        cached_tokens=0,
        reported_completion_tokens=0,
        price_currency="USD",
        price_input=Decimal("2.50"),
        price_output=Decimal("15.00"),
        price_verified_on=datetime.date(2026, 11, 30),
        error="lease lost",
    )
    cost = run_cost(first)
    assert cost["amount"] == CALL_COST + Decimal("0.0025")
    assert (cost["calls"], cost["unpriced_calls"], cost["complete"]) == (2, 0, True)
    assert session_cost(session)["amount"] == 2 * CALL_COST + Decimal("0.0025")


def test_calls_without_a_price_have_no_cost(alice, make_demo_session):
    engine_adapter.set_gateway_factory(lambda version, connection: UsageGateway())
    try:
        run = ask(make_demo_session(), alice, "hello")
    finally:
        engine_adapter.set_gateway_factory(None)
    assert ModelCall.objects.get(run=run).cost is None
    assert run_cost(run) is None


def test_an_unpriced_call_makes_the_sum_a_marked_lower_bound(alice, make_demo_session, priced):
    run = ask(make_demo_session(), alice, "hello")
    ModelCall.objects.create(run=run, purpose="action", error="gateway_error: timeout")
    cost = run_cost(run)
    assert (cost["amount"], cost["unpriced_calls"], cost["complete"]) == (CALL_COST, 1, False)


def test_the_api_shows_costs_with_currency_and_price_date(alice, make_demo_session, priced):
    session = make_demo_session()
    run = ask(session, alice, "hello")
    api = client_for(alice)
    (call,) = api.get(f"/api/v1/runs/{run.pk}/model-calls").json()["results"]
    assert call["cost"] == {
        "amount": "0.037",
        "currency": "USD",
        "price_date": "2026-11-30",
        "price_source": PRICE.source_url,
        "price_band": None,
    }
    expected = {
        "amount": "0.037",
        "currency": "USD",
        "price_date": ["2026-11-30"],
        "calls": 1,
        "unpriced_calls": 0,
        "complete": True,
    }
    assert api.get(f"/api/v1/runs/{run.pk}/").json()["cost"] == expected
    assert api.get(f"/api/v1/runs/{run.pk}/context").json()["cost"] == expected
    assert api.get(f"/api/v1/sessions/{session.pk}/").json()["cost"] == expected


def test_the_price_in_force_is_read_for_the_exact_model_on_the_official_endpoint(
    make_demo_session,
):
    space = make_demo_session().space
    connection = make_connection(space, provider="openai", model_id="gpt-5.4")
    connection.base_url = "https://api.openai.com/v1"
    connection.save()
    version = SimpleNamespace(
        snapshot={"budget": {"connection_id": connection.pk, "model_id": "gpt-5.4"}}
    )
    assert engine_adapter.price_for(version).prices.input == Decimal("2.50")
    connection.base_url = "https://proxy.example/v1"
    connection.save()
    assert engine_adapter.price_for(version) is None


def test_the_context_page_shows_call_run_and_session_costs(alice, make_demo_session, priced):
    from django.test import Client
    from django.urls import reverse

    session = make_demo_session()
    run = ask(session, alice, "hello")
    browser = Client()
    browser.force_login(alice)
    page = browser.get(reverse("console-run-context", args=[run.pk])).content.decode()
    assert '<td class="nowrap call-cost">0.037 USD</td>' in page
    assert "Cost of this run: <strong>0.037 USD</strong>" in page
    assert "prices verified 2026-11-30" in page
    assert '<strong id="session-cost">0.037 USD</strong>' in page


def test_the_cached_share_per_run_sums_the_call_rows_and_knows_what_it_does_not(
    alice, make_demo_session, client
):
    session = make_demo_session()
    first, second, third = (ask(session, alice, question) for question in ("one", "two", "x"))
    ModelCall.objects.filter(run=first).update(reported_prompt_tokens=1_000, cached_tokens=250)
    ModelCall.objects.filter(run=second).update(reported_prompt_tokens=1_500, cached_tokens=None)
    ModelCall.objects.create(
        run=second, purpose="compaction", reported_prompt_tokens=500, cached_tokens=500
    )
    # Run 3 answered without usage; its failed call reported none either, and is not unknown.
    ModelCall.objects.filter(run=third).update(reported_prompt_tokens=None, cached_tokens=None)
    ModelCall.objects.create(run=third, purpose="action", error="connection reset")
    shares = cached_share_by_run(session)
    assert [(row["number"], row["prompt_tokens"], row["cached_tokens"]) for row in shares] == [
        (1, 1_000, 250),
        (2, 2_000, 500),
        (3, None, 0),
    ]
    assert [row["share"] for row in shares] == [0.25, 0.25, None]
    assert [row["compaction_share"] for row in shares] == [None, 1.0, None]
    assert [row["unreported"] for row in shares] == [0, 0, 1]
    client.force_login(alice)
    page = client.get(f"/runs/{third.pk}/context/").content.decode()
    table = page[page.index('id="cache-runs"') :]
    assert table.count("25.0%") == 2 and "100.0%" in table
    assert table.count('<span class="quiet no-usage">unknown</span>') == 2  # tokens and share
    chart = page[page.index('<svg class="chart"') : page.index("</svg>")]
    assert chart.count('<rect class="series-0"') == 2
    assert chart.count('<rect class="unknown"') == 1 and "Run #3: unknown" in chart
    assert "<script" not in chart and "style=" not in chart
