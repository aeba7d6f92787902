"""A tool server's questions over the API: listed on the run object, answered by the creator."""

from __future__ import annotations

import pytest

from sessions_app.models import Run
from tests.api.factories import client_for
from tests.factories import approval_session, ask
from tests.support.mcp_servers import Calls, mcp_app, serve

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def mcp_server():
    calls = Calls()
    with serve(mcp_app(calls, asking=True)) as base:
        yield base + "/mcp", calls


@pytest.fixture(autouse=True)
def private_tool_hosts(settings):
    settings.ALLOW_PRIVATE_TOOL_HOSTS = True


@pytest.fixture
def waiting(alice, space, mcp_server):
    url, _calls = mcp_server
    session = approval_session(alice, space, url, ["demo__book"], approval={"demo__book": "never"})
    run = ask(session, alice, '/tool demo__book {"room": "blue"}')
    assert run.status == Run.Status.WAITING_INPUT
    return run


def _answer(client, run, **body):
    return client.post(f"/api/v1/runs/{run.pk}/answers", body, "json")


def test_the_run_object_lists_its_pending_questions(api, waiting):
    body = api.get(f"/api/v1/runs/{waiting.pk}/").json()
    assert body["status"] == "waiting_input"
    [question] = body["pending_questions"]
    assert question["key"] == "day" and question["server"] == "demo"
    assert question["mode"] == "form" and question["message"] == "Which day for <b>blue</b>?"
    assert {field["name"]: field["type"] for field in question["fields"]} == {
        "day": "string",
        "nights": "integer",
        "breakfast": "boolean",
        "size": "enum",
    }
    assert "request_state" not in question


def test_an_answer_is_202_with_the_queued_run_a_second_409(api, waiting):
    content = {"day": "2026-12-24", "nights": 2}
    response = _answer(api, waiting, key="day", action="accept", content=content)
    assert response.status_code == 202, response.json()
    assert response.json()["status"] == "queued" and response.json()["pending_questions"] == []
    again = _answer(api, waiting, key="day", action="decline")
    assert again.status_code == 409
    assert again.json() == {"detail": "This question has already been answered."}


def test_bad_answers_are_400_naming_the_field(api, waiting):
    response = _answer(api, waiting, key="day", action="accept", content={"day": "x"})
    assert response.status_code == 400 and "content.nights" in response.json()
    response = _answer(api, waiting, key="day", action="perhaps")
    assert response.status_code == 400 and "action" in response.json()
    response = _answer(api, waiting, key="nope", action="decline")
    assert response.status_code == 400 and "key" in response.json()
    response = _answer(api, waiting, key="day", action="decline", extra=1)
    assert response.status_code == 400


def test_someone_else_gets_404(bob, waiting):
    from agentloom.spaces.models import Membership

    Membership.objects.create(space=waiting.session.space, user=bob, role=Membership.Role.ADMIN)
    response = _answer(client_for(bob), waiting, key="day", action="decline")
    assert response.status_code == 404


def test_the_panel_shows_the_form_with_the_servers_text_escaped(alice, waiting):
    from django.test import Client
    from django.urls import reverse

    browser = Client()
    browser.force_login(alice)
    html = browser.get(reverse("console-run-panel", args=[waiting.pk])).content.decode()
    assert "Which day for &lt;b&gt;blue&lt;/b&gt;?" in html
    assert "<b>blue</b>" not in html
    assert "must not ask for passwords, keys or other secrets" in html
    assert 'name="nights"' in html and 'data-type="integer"' in html
    assert '<option value="double"' in html
