"""Pinned instructions: carried word for word after the system prompt into every view of every
run asked since, compactions included; counted in the room for a question; replayed as run."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from context_app.engine_adapter import input_check
from sessions_app.models import ModelCall, Run, Session
from sessions_app.services.replay import replay_run
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db

RULE = "NONCE-PIN: always answer in metric units; never delete /srv/data."


def _api(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def _system(request) -> str:
    return request.messages[0]["content"]


def test_a_pinned_rule_is_in_every_view_word_for_word_after_20_compactions(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    before = ask(session, alice, "NONCE-BEFORE first question")
    response = _api(alice).post(f"/api/v1/sessions/{session.pk}/pin", {"text": RULE}, format="json")
    assert response.status_code == 200 and response.json()["pinned"] == RULE
    assert Run.objects.get(pk=before.pk).pinned == ""  # asked before: not carried
    gateway.requests.clear()
    asked = 0
    while ModelCall.objects.filter(run__session=session, purpose="compaction").count() < 20:
        asked += 1
        assert asked <= 60, "twenty compactions within sixty questions"
        run = ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{asked}')
        assert run.status == "succeeded", run.error
    actions = [r for r in gateway.requests if r.purpose == "action"]
    assert actions and all(_system(r).endswith(RULE) for r in actions)
    assert all(
        RULE in _system(r)
        for r in gateway.requests
        if r.purpose == "compaction" and r.messages[0].get("role") == "system" and r.tools
    )
    assert replay_run(Run.objects.get(pk=run.pk)).ok


def test_pins_count_in_the_room_for_a_question_and_too_many_are_refused(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    version = session.agent_version
    assert input_check(version, "", RULE).limit < input_check(version, "").limit
    api = _api(alice)
    huge = "word " * 1_500
    refused = api.post(f"/api/v1/sessions/{session.pk}/pin", {"text": huge}, format="json")
    assert refused.status_code == 400 and "text" in refused.json()
    assert Session.objects.get(pk=session.pk).pinned == ""
    # Unpinned by a blank text; only the session's creator pins.
    api.post(f"/api/v1/sessions/{session.pk}/pin", {"text": RULE}, format="json")
    assert (
        api.post(f"/api/v1/sessions/{session.pk}/pin", {"text": ""}, format="json").json()["pinned"]
        == ""
    )
    other = _api(make_user("mallory"))
    assert (
        other.post(f"/api/v1/sessions/{session.pk}/pin", {"text": RULE}, format="json").status_code
        == 404
    )
    assert Session.objects.get(pk=session.pk).pinned == ""


def test_the_console_pins_from_the_chat_page(alice, gateway, make_demo_session, client):
    session = make_demo_session()
    client.force_login(alice)
    response = client.post(f"/sessions/{session.pk}/pin/", {"text": RULE})
    assert response.status_code == 302
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert 'id="pinned-note"' in page and "NONCE-PIN" in page
    run = ask(session, alice, "and now?")
    assert Run.objects.get(pk=run.pk).pinned == RULE
    assert _system(gateway.action_requests()[-1]).endswith(RULE)


def test_a_questions_pin_button_adds_it_to_the_pins(alice, gateway, make_demo_session, client):
    session = make_demo_session()
    client.force_login(alice)
    client.post(f"/sessions/{session.pk}/pin/", {"text": RULE})
    first = ask(session, alice, "Always answer in French, NONCE-FR.")
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    assert f'name="run" value="{first.pk}"' in page and "Pin question" in page
    assert client.post(f"/sessions/{session.pk}/pin/", {"run": first.pk}).status_code == 302
    assert (
        Session.objects.get(pk=session.pk).pinned == f"{RULE}\nAlways answer in French, NONCE-FR."
    )
    ask(session, alice, "and now?")
    assert _system(gateway.action_requests()[-1]).endswith("Always answer in French, NONCE-FR.")
    # Another session's run, or no run at all, is refused by name and pins nothing.
    other = make_demo_session()
    foreign = ask(other, alice, "NONCE-OTHER")
    for value in (foreign.pk, "x", ""):
        response = client.post(f"/sessions/{session.pk}/pin/", {"run": value}, follow=True)
        assert "not a question of this session" in response.content.decode()
    assert "NONCE-OTHER" not in Session.objects.get(pk=session.pk).pinned
