"""A call answered without usage (a stream that carried none) is recorded as such, never as
zero: the meter, the model-call list of the console and of the admin, and the API say "no usage
reported", and its cost is unknown."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agentloom.engine import ModelGateway
from agentloom.engine.testing import text_response
from agentloom.spaces.models import Membership
from context_app import engine_adapter
from sessions_app.models import ModelCall
from tests.api.factories import client_for
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db


class SilentGateway(ModelGateway):
    """Answers as a stream without usage ends: the reply, and usage None."""

    provider, model_id = "double", "local-demo"

    def complete(self, request):
        return text_response("done", usage=None)


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def silent():
    engine_adapter.set_gateway_factory(lambda version, connection: SilentGateway())
    yield
    engine_adapter.set_gateway_factory(None)


def test_a_call_without_usage_is_shown_as_no_usage_reported(alice, make_demo_session, silent):
    session = make_demo_session()
    connection = session.agent_version.model_connection
    connection.prices = {
        "currency": "USD",
        "input": "1",
        "cached_input": None,
        "output": "2",
        "entered_on": "2026-12-01",
    }
    connection.save()
    run = ask(session, alice, "hello")
    assert run.status == "succeeded", run.error
    (call,) = ModelCall.objects.filter(run=run)
    assert call.usage is None and call.reported_prompt_tokens is None
    assert call.reported_completion_tokens is None and call.cost is None
    assert call.usage_unreported

    html = page(alice).get(reverse("console-run-context", args=[run.pk])).text
    row = html[html.index(f'id="model-call-{call.pk}"') :].split("</tr>")[0]
    assert row.count("no usage reported") == 3  # reported input, usage and cost
    assert "unknown (no usage reported)" in row  # the cost
    assert "last call: <strong>no usage reported</strong>" in html

    context = client_for(alice).get(f"/api/v1/runs/{run.pk}/context").json()
    assert context["last_call_unreported"] is True and context["last_reported"] is None

    root = make_user("root", superuser=True)
    Membership.objects.create(space=session.space, user=root, role=Membership.Role.ADMIN)
    listing = page(root).get("/admin/sessions_app/modelcall/").content.decode()
    assert "no usage reported" in listing


def test_a_call_with_usage_is_shown_with_its_tokens(alice, make_demo_session):
    run = ask(make_demo_session(), alice, "hello")
    call = ModelCall.objects.filter(run=run).first()
    assert call.usage and not call.usage_unreported
    html = page(alice).get(reverse("console-run-context", args=[run.pk])).text
    row = html[html.index(f'id="model-call-{call.pk}"') :].split("</tr>")[0]
    assert "no usage reported" not in row
    assert "no usage reported" not in html.split('id="model-calls"')[0]  # the meter
