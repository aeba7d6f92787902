"""No input ends in a 500: bodies nested past the parser's limits, integers spelt as floats."""

from __future__ import annotations

import json

import pytest

from agentloom.validation import MAX_JSON_DEPTH

pytestmark = pytest.mark.django_db

# Every endpoint that reads a JSON body, with the method that sends one.
BODY_ENDPOINTS = [
    ("post", "/api/v1/spaces/"),
    ("post", "/api/v1/spaces/{space}/members"),
    ("post", "/api/v1/agents/"),
    ("patch", "/api/v1/agents/{agent}/"),
    ("post", "/api/v1/sessions/"),
    ("post", "/api/v1/sessions/{session}/runs"),
    ("post", "/api/v1/runs/{run}/supplements"),
    ("post", "/api/models/discover"),
    ("post", "/api/v1/model-connections/"),
    ("patch", "/api/v1/model-connections/{connection}/"),
]
# Endpoints that take a POST without reading its body.
BODYLESS_POSTS = [
    "/api/v1/agents/{agent}/publish",
    "/api/v1/runs/{run}/resume",
    "/api/v1/runs/{run}/cancel",
    "/api/v1/sessions/{session}/views/1/revoke",
]

# What the probe sent: 954 levels, 1.9 KB, past what Python's parser can recurse.
DEEP_ARRAY = b"[" * 954 + b"]" * 954
DEEP_FIELD = b'{"name": ' + b'{"a": ' * 954 + b"1" + b"}" * 954 + b"}"
JUST_TOO_DEEP = json.dumps({"name": json.loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)})


def _url(template, run):
    session = run.session
    return template.format(
        space=session.space_id,
        agent=session.agent_id,
        session=session.pk,
        run=run.pk,
        connection=session.agent.model_connection_id,
    )


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_FIELD, JUST_TOO_DEEP.encode()])
@pytest.mark.parametrize(("method", "template"), BODY_ENDPOINTS)
def test_deeply_nested_bodies_are_400(method, template, body, api, run):
    assert len(DEEP_ARRAY) < 2_000
    response = getattr(api, method)(_url(template, run), body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "nested more than" in response.json()["detail"]


@pytest.mark.parametrize("template", BODYLESS_POSTS)
def test_deeply_nested_bodies_are_harmless_where_no_body_is_read(template, api, run):
    response = api.post(_url(template, run), DEEP_ARRAY, content_type="application/json")
    assert response.status_code < 500


def test_nesting_up_to_the_limit_is_parsed(api, run):
    # One level less than the limit inside the body object: the parser lets it through, and
    # the serializer answers about the field's type as usual.
    inner = json.loads("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))
    response = api.post(_url("/api/v1/spaces/", run), {"name": inner}, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["name"]


@pytest.mark.parametrize(
    ("template", "query", "name"),
    [
        ("/api/v1/spaces/", "limit=0.0", "limit"),
        ("/api/v1/spaces/", "limit=1.0", "limit"),
        ("/api/v1/spaces/", "offset=0.0", "offset"),
        ("/api/v1/sessions/{session}/runs", "offset=%200", "offset"),
        ("/api/v1/sessions/{session}/messages", "after=0.0", "after"),
        ("/api/v1/sessions/{session}/messages", "limit=5.0", "limit"),
        ("/api/v1/sessions/{session}/messages", "after=1e3", "after"),
    ],
)
def test_integer_query_parameters_refuse_other_spellings(template, query, name, api, run):
    response = api.get(f"{_url(template, run)}?{query}")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [name]


def test_integer_query_parameters_still_take_digits(api, run):
    url = _url("/api/v1/sessions/{session}/messages", run)
    assert api.get(f"{url}?after=0&limit=5").status_code == 200
    assert api.get("/api/v1/spaces/?limit=1&offset=0").status_code == 200


@pytest.mark.parametrize(
    "field", ["tools", "sub_agents-0-name", "sub_agents-0-tools", "user_turns"]
)
def test_the_agent_admin_form_refuses_hostile_values_without_a_500(field, run, client):
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser(username="root", password="pw-root")
    client.force_login(root)
    agent = run.session.agent
    data = {
        "space": agent.space_id,
        "owner": agent.owner_id,
        "name": agent.name,
        "system_prompt": agent.system_prompt,
        field: DEEP_ARRAY.decode(),
    }
    response = client.post(f"/admin/context_app/agent/{agent.pk}/change/", data)
    assert response.status_code == 200
    assert 'class="errorlist' in response.content.decode()


def test_console_shows_absurdly_deep_tool_arguments_as_written():
    from sessions_app.console.presenters import pretty_arguments

    raw = "[" * 50_000 + "]" * 50_000  # past the parser's limit at any stack depth
    assert pretty_arguments(raw) == raw
