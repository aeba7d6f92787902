"""An input the run could never compact below its target is refused before it is journaled."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentloom.engine import ContextPolicy, JsonBytesEstimator, ModelBudget, check_input
from agentloom.engine._measure import input_limit, input_size, plan_reserve
from agentloom.errors import InvalidInput
from context_app.engine_adapter import input_check
from sessions_app.models import Run, RunSupplement, SessionMessage
from sessions_app.services.runs import run_ask, supplement_add
from tests.factories import ask

pytestmark = pytest.mark.django_db


def test_the_limit_is_the_target_less_what_is_pinned():
    policy, budget = ContextPolicy(), ModelBudget(32_768, 4_096, 1_024)
    estimator = JsonBytesEstimator()
    tools = [{"type": "function", "function": {"name": "echo", "parameters": {}}}]
    bare = input_limit(
        policy=policy, budget=budget, estimator=estimator, system_prompt="", tools=[]
    )
    pinned = input_limit(
        policy=policy, budget=budget, estimator=estimator, system_prompt="s" * 1_000, tools=tools
    )
    assert bare < policy.target_at(budget)
    assert pinned < bare - 1_000  # the system prompt and the schema are counted
    four_thousand = input_size(policy=policy, estimator=estimator, text="x" * 4_000)
    big = ModelBudget(128_000, 4_096, 1_024)
    assert plan_reserve(policy=policy, budget=big, estimator=estimator) == four_thousand
    small = ModelBudget(6_144, 512, 256)  # a small window keeps room for its inputs
    assert plan_reserve(policy=policy, budget=small, estimator=estimator) == int(
        0.1 * policy.target_at(small)
    )
    fits = check_input(
        policy=policy, budget=budget, estimator=estimator, system_prompt="", tools=[], text="hi"
    )
    assert fits.fits and fits.size == JsonBytesEstimator().estimate(
        [{"role": "user", "content": "hi"}], []
    ) - JsonBytesEstimator().estimate([], [])


def test_a_huge_question_is_refused_naming_its_estimate_and_the_limit(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=6_144)
    ask(session, alice, "NONCE-BEFORE")
    before = list(SessionMessage.objects.filter(session=session).values_list("seq", "entry_key"))
    runs = Run.objects.filter(session=session).count()
    huge = "x" * 50_000
    check = input_check(session.agent_version, huge)
    with pytest.raises(InvalidInput) as refused:
        run_ask(user=alice, session=session, question=huge)
    assert refused.value.field == "question"
    assert f"{check.size:,} UTF-8 bytes" in refused.value.detail
    assert f"{check.limit:,} UTF-8 bytes" in refused.value.detail
    # Nothing was journaled or queued, and the session goes on as before.
    assert (
        list(SessionMessage.objects.filter(session=session).values_list("seq", "entry_key"))
        == before
    )
    assert Run.objects.filter(session=session).count() == runs
    assert ask(session, alice, "NONCE-AFTER").status == Run.Status.SUCCEEDED


def test_the_api_answers_400_for_an_oversized_question_or_supplement(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=6_144)
    client = APIClient()
    client.force_authenticate(alice)
    answer = client.post(
        f"/api/v1/sessions/{session.pk}/runs", {"question": "y" * 40_000}, format="json"
    )
    assert answer.status_code == 400
    assert "estimated at" in answer.json()["question"][0]
    run = run_ask(user=alice, session=session, question="a small question")
    answer = client.post(
        f"/api/v1/runs/{run.pk}/supplements", {"text": "z" * 15_000}, format="json"
    )
    assert answer.status_code == 400
    assert "limit" in answer.json()["text"][0]
    assert not RunSupplement.objects.filter(run=run).exists()
    supplement_add(user=alice, run=run, text="a small supplement")
    assert RunSupplement.objects.filter(run=run).count() == 1


def test_the_ask_box_shows_the_limit(alice, gateway, make_demo_session, client):
    session = make_demo_session(context_window=6_144)
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/")
    assert page.status_code == 200
    limit = input_check(session.agent_version, "").limit
    assert f'"inputLimit": {limit}' in page.content.decode()
    assert "data-ask-size" in page.content.decode()
