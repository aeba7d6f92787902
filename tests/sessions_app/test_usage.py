"""The spend record: written with the calls it counts, equal to their sums, kept after a purge."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.db.models import Sum

from agentloom.engine import ModelGateway
from agentloom.engine.testing import text_response
from agentloom.spaces.models import Space
from context_app import engine_adapter
from sessions_app.models import ModelCall, Run, UsageDay
from sessions_app.services import execution
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.usage import UsageOwner, compaction_counts, reasoning_tokens
from tests.factories import ask, make_user
from tests.sessions_app.test_costs import CALL_COST, PRICE, USAGE

pytestmark = pytest.mark.django_db

REASONING_USAGE = {**USAGE, "completion_tokens_details": {"reasoning_tokens": 700}}


class ReasoningGateway(ModelGateway):
    provider, model_id = "double", "local-demo"

    def complete(self, request):
        return text_response("done", usage=REASONING_USAGE)


@pytest.fixture
def priced(monkeypatch):
    engine_adapter.set_gateway_factory(lambda version, connection: ReasoningGateway())
    monkeypatch.setattr(execution, "price_for", lambda version, at=None, **read: PRICE)
    yield
    engine_adapter.set_gateway_factory(None)


def _record(space_id: int) -> dict[str, object]:
    rows = UsageDay.objects.filter(space_id=space_id)
    return rows.aggregate(
        calls=Sum("calls"),
        input=Sum("input_tokens"),
        cached=Sum("cached_tokens"),
        output=Sum("output_tokens"),
        reasoning=Sum("reasoning_tokens"),
        cost=Sum("cost"),
        succeeded=Sum("runs_succeeded"),
    )


def _call_sums(space_id: int) -> dict[str, object]:
    calls = ModelCall.objects.filter(run__session__space_id=space_id)
    sums = calls.aggregate(
        input=Sum("reported_prompt_tokens"),
        cached=Sum("cached_tokens"),
        output=Sum("reported_completion_tokens"),
    )
    return {
        "calls": calls.count(),
        **sums,
        "cost": sum((call.cost for call in calls), Decimal(0)),
    }


def test_the_record_equals_the_calls_sums_and_survives_a_purge(alice, make_demo_session, priced):
    session = make_demo_session()
    for question in ("one", "two", "three"):
        ask(session, alice, question)
    space_id = session.space_id
    before = _call_sums(space_id)
    record = _record(space_id)
    assert before["calls"] == 3 and before["cost"] == 3 * CALL_COST
    assert {key: record[key] for key in before} == before
    assert record["reasoning"] == 3 * 700 and record["succeeded"] == 3
    row = UsageDay.objects.get(space_id=space_id)
    assert (row.agent_id, row.member_id, row.model, row.currency) == (
        session.agent_id,
        alice.pk,
        session.agent_version.snapshot["budget"]["model_id"],
        "USD",
    )

    session_delete(user=alice, session=session)
    session_purge(user=make_user("root", superuser=True), session_id=session.pk)
    assert not ModelCall.objects.filter(run__session__space_id=space_id).exists()
    assert _record(space_id) == record


def test_a_run_and_its_calls_count_once_on_the_spaces_day(alice, make_demo_session, priced):
    session = make_demo_session()
    Space.objects.filter(pk=session.space_id).update(time_zone="Pacific/Kiritimati")
    ask(session, alice, "hello")
    row = UsageDay.objects.get(space_id=session.space_id)
    # UTC+14: the space's day, not the server's.
    assert row.day == UsageOwner(0, "Pacific/Kiritimati", 0, 0, "").today()
    assert (row.calls, row.runs_succeeded, row.runs_failed) == (1, 1, 0)


def test_a_failed_run_is_counted_as_failed(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = ask(session, alice, "[boom] please")
    assert run.status == Run.Status.FAILED
    row = UsageDay.objects.get(space_id=session.space_id)
    assert (row.runs_succeeded, row.runs_failed, row.failed_calls, row.calls) == (0, 1, 1, 1)
    # An unbilled failure (no usage) leaves no unknown cost behind.
    assert row.unpriced_calls == 0 and row.currency == ""


def test_the_day_follows_the_space_zone():
    owner = UsageOwner(1, "America/New_York", 1, 1, "m")
    late = datetime.datetime(2026, 3, 2, 3, 30, tzinfo=datetime.UTC)
    assert owner.today(late) == datetime.date(2026, 3, 1)
    assert UsageOwner(1, "UTC", 1, 1, "m").today(late) == datetime.date(2026, 3, 2)


def test_reasoning_tokens_are_read_only_when_reported():
    assert reasoning_tokens(REASONING_USAGE) == 700
    assert reasoning_tokens(USAGE) is None
    assert reasoning_tokens({"completion_tokens_details": {"reasoning_tokens": True}}) is None


def test_compaction_stages_are_counted_by_stage_and_outcome():
    rows = [
        {"stage": "masking", "outcome": "applied"},
        {"stage": "masking", "outcome": "discarded"},
        {"stage": "summary", "outcome": "succeeded"},
        {"outcome": "succeeded"},
        {"outcome": "failed"},
        {"outcome": "skipped", "reason": "throttled"},
    ]
    assert compaction_counts(rows) == {"summaries": 2, "maskings": 1, "compactions_failed": 1}


def _limit(session, amount: str, **fields):
    from models_app.models import SpendLimit

    return SpendLimit.objects.create(
        space_id=session.space_id, currency="USD", amount=Decimal(amount), **fields
    )


def test_a_spend_limit_refuses_a_run_past_it_and_warns_near_it(alice, make_demo_session, priced):
    from agentloom.errors import SpendLimitReached
    from sessions_app.services.runs import run_ask

    session = make_demo_session()
    _limit(session, "0.07", agent_id=session.agent_id, warn_share=0.4)
    first = ask(session, alice, "one")
    assert first.status == Run.Status.SUCCEEDED
    second = run_ask(user=alice, session=session, question="two")
    assert second.spend_warnings == [
        "53% of the spend limit of this agent's usage (0.07 USD a month) is used."
    ]
    from sessions_app.services.execution import run_execute

    run_execute(run_id=second.pk)
    with pytest.raises(SpendLimitReached, match=r"0\.07 of 0\.07 USD this month"):
        run_ask(user=alice, session=session, question="three")


def test_a_limit_of_another_member_or_currency_does_not_apply(
    alice, carol, make_demo_session, priced
):
    session = make_demo_session()
    from models_app.models import SpendLimit

    _limit(session, "0", member=carol)
    SpendLimit.objects.create(space_id=session.space_id, currency="CNY", amount=Decimal("0"))
    assert ask(session, alice, "one").status == Run.Status.SUCCEEDED
    assert ask(session, alice, "two").status == Run.Status.SUCCEEDED
