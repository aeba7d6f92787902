"""What runs learn from a server, on its connection: recorded once with the server's words, the
date and an audit row, never raising the window, shown in the API and on the model page, and
overridden by a person's edit; the reasoning setting beside it."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.db import transaction

from agentloom.errors import InvalidInput
from agentloom.spaces.models import Membership
from models_app.models import ModelConnection
from models_app.services.connections import connection_learn, connection_update
from tests.api.factories import client_for
from tests.factories import make_connection, make_user

pytestmark = pytest.mark.django_db

EVIDENCE = "maximum context length is 4096 tokens"


@pytest.fixture
def compatible(space):
    """A llama.cpp-style server as discovered: no window named, so the 32K platform default."""
    return make_connection(
        space,
        provider="openai_compatible",
        base_url="https://llm.example.com/v1",
        model_id="smollm2",
        context_window=32_768,
        max_output_tokens=4_096,
        safety_margin_tokens=1_024,
        window_source="platform_default",
    )


def learn(connection, user, value=4_096, *, kind="context_window", evidence=EVIDENCE):
    return connection_learn(
        connection_id=connection.pk,
        kind=kind,
        value=value,
        evidence=evidence,
        user_id=user.pk,
        origin="run #3 of session 7",
    )


def history(connection) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=str(connection.pk)).order_by("id"))


def test_a_learned_window_is_recorded_once_with_its_evidence_and_an_audit_row(alice, compatible):
    assert learn(compatible, alice) is True
    compatible.refresh_from_db()
    assert (compatible.context_window, compatible.window_source) == (4_096, "learned")
    assert compatible.learned_window == 4_096
    assert compatible.learned_window_evidence == EVIDENCE
    assert compatible.learned_window_at is not None
    # The output reservation shrank so the window still leaves an input budget.
    assert compatible.effective_input_budget > 0
    (entry,) = history(compatible)
    assert entry.user == alice and entry.is_change()
    assert "4,096" in entry.change_message and EVIDENCE in entry.change_message
    assert "run #3 of session 7" in entry.change_message
    # The same refusal again, or a larger window, changes nothing and writes no second row.
    assert learn(compatible, alice) is False
    assert learn(compatible, alice, 8_192) is False
    assert len(history(compatible)) == 1


def test_a_learned_window_never_raises_the_window(alice, compatible):
    compatible.context_window = 2_048
    compatible.max_output_tokens = 512
    compatible.save()
    assert learn(compatible, alice, 4_096) is False
    compatible.refresh_from_db()
    assert compatible.context_window == 2_048 and compatible.learned_window is None
    assert history(compatible) == []


def test_a_smaller_window_learned_later_replaces_the_first(alice, compatible):
    learn(compatible, alice, 4_096)
    assert learn(compatible, alice, 3_000, evidence="between 2500 and 3000 tokens") is True
    compatible.refresh_from_db()
    assert (compatible.context_window, compatible.learned_window) == (3_000, 3_000)
    assert len(history(compatible)) == 2


def test_recording_what_was_learned_is_its_own_transaction(alice, compatible):
    with pytest.raises(RuntimeError, match="durable atomic block"), transaction.atomic():
        learn(compatible, alice)


def test_a_person_overrides_a_learned_window_by_editing_the_window(alice, compatible):
    learn(compatible, alice)
    connection_update(user=alice, connection=compatible, name="renamed")
    compatible.refresh_from_db()
    assert compatible.learned_window == 4_096  # an unrelated edit keeps it
    connection_update(user=alice, connection=compatible, context_window=8_192)
    compatible.refresh_from_db()
    assert (compatible.context_window, compatible.window_source) == (8_192, "manual")
    assert compatible.learned_window is None and compatible.learned_window_evidence == ""
    assert compatible.learned_window_at is None
    assert len(history(compatible)) == 1  # what was learned stays in the history


def test_a_person_cannot_claim_a_learned_source(alice, compatible):
    with pytest.raises(InvalidInput) as raised:
        connection_update(
            user=alice, connection=compatible, context_window=16_384, window_source="learned"
        )
    assert raised.value.field == "window_source"


def test_a_learned_reasoning_rule_is_recorded_once(alice, compatible):
    evidence = "reasoning_content must be passed back"
    assert learn(compatible, alice, "tool_spans", kind="reasoning", evidence=evidence) is True
    assert learn(compatible, alice, "tool_spans", kind="reasoning", evidence=evidence) is False
    compatible.refresh_from_db()
    assert compatible.learned_reasoning == "tool_spans"
    assert compatible.reasoning_passback == ""  # the person's setting is untouched
    (entry,) = history(compatible)
    assert "tool_spans" in entry.change_message


def test_the_api_shows_what_was_learned_and_refuses_to_write_it(alice, compatible):
    learn(compatible, alice)
    api = client_for(alice)
    url = f"/api/v1/model-connections/{compatible.pk}"
    data = api.get(url).json()
    assert data["learned_window"] == 4_096 and data["window_source"] == "learned"
    assert data["learned_window_evidence"] == EVIDENCE and data["learned_window_at"]
    assert data["learned_reasoning"] == "" and data["reasoning_passback"] == ""
    for field, value in (("learned_window", 9_000), ("learned_reasoning", "never")):
        response = api.patch(url, {field: value}, format="json")
        assert response.status_code == 400, field
        assert field in response.content.decode()
    response = api.patch(url, {"reasoning_passback": "tool_spans"}, format="json")
    assert response.status_code == 200 and response.json()["reasoning_passback"] == "tool_spans"
    response = api.patch(url, {"reasoning_passback": "sometimes"}, format="json")
    assert response.status_code == 400 and "reasoning_passback" in response.content.decode()


def test_the_demo_model_has_no_reasoning_setting(alice, space):
    demo = make_connection(space)
    with pytest.raises(InvalidInput) as raised:
        connection_update(user=alice, connection=demo, reasoning_passback="never")
    assert raised.value.field == "reasoning_passback"


def test_the_model_page_shows_the_learned_window_and_the_reasoning_setting(
    alice, compatible, client
):
    learn(compatible, alice)
    learn(compatible, alice, "tool_spans", kind="reasoning", evidence="reasoning is missing")
    root = make_user("root", superuser=True)
    Membership.objects.create(space=compatible.space, user=root, role=Membership.Role.ADMIN)
    client.force_login(root)
    page = client.get(f"/admin/models_app/modelconnection/{compatible.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Learned from the server" in text and "4,096" in text and EVIDENCE in text
    assert 'name="reasoning_passback"' in text and "tool_spans" in text
    history_page = client.get(f"/admin/models_app/modelconnection/{compatible.pk}/history/")
    assert EVIDENCE in history_page.content.decode()


def test_server_is_an_estimator_of_self_hosted_servers_only(alice, compatible, space):
    connection_update(
        user=alice, connection=compatible, estimator="server", estimator_source="auto"
    )
    compatible.refresh_from_db()
    assert (compatible.estimator, compatible.estimator_source) == ("server", "auto")
    connection_update(user=alice, connection=compatible, name="kept")
    compatible.refresh_from_db()
    assert compatible.estimator == "server"  # kept while the model stays the same
    official = make_connection(
        space, provider="openai", base_url="https://api.openai.com/v1", model_id="gpt-4o"
    )
    official.api_key = "sk-test"
    official.save()
    with pytest.raises(InvalidInput) as raised:
        connection_update(user=alice, connection=official, estimator="server")
    assert raised.value.field == "estimator"
    assert ModelConnection.objects.get(pk=official.pk).estimator != "server"
