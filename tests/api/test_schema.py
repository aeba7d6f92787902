"""The OpenAPI schema and docs are served, and the API keeps to the schema (schemathesis)."""

from __future__ import annotations

import functools

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework import serializers
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from agentloom.spaces.services.tokens import token_create

OPERATIONS = [
    ("GET", "/api/v1/spaces/"),
    ("POST", "/api/v1/spaces/"),
    ("POST", "/api/v1/spaces/{id}/members"),
    ("GET", "/api/v1/spaces/{id}/retention"),
    ("POST", "/api/v1/spaces/{id}/retention"),
    ("GET", "/api/v1/agents/"),
    ("POST", "/api/v1/agents/"),
    ("GET", "/api/v1/agents/{id}/"),
    ("PATCH", "/api/v1/agents/{id}/"),
    ("POST", "/api/v1/agents/{id}/publish"),
    ("GET", "/api/v1/agents/{id}/versions/"),
    ("GET", "/api/v1/sessions/"),
    ("POST", "/api/v1/sessions/"),
    ("GET", "/api/v1/sessions/{id}/"),
    ("DELETE", "/api/v1/sessions/{id}/"),
    ("GET", "/api/v1/sessions/{id}/runs"),
    ("POST", "/api/v1/sessions/{id}/runs"),
    ("GET", "/api/v1/sessions/{id}/messages"),
    ("GET", "/api/v1/sessions/{id}/views/"),
    ("GET", "/api/v1/sessions/{id}/export"),
    ("POST", "/api/v1/sessions/{id}/fork"),
    ("POST", "/api/v1/sessions/import"),
    ("POST", "/api/v1/sessions/{id}/pin"),
    ("GET", "/api/v1/sessions/{id}/hold"),
    ("POST", "/api/v1/sessions/{id}/hold"),
    ("POST", "/api/v1/sessions/{id}/views/{revision}/revoke"),
    ("GET", "/api/v1/runs/{id}/"),
    ("POST", "/api/v1/runs/{id}/supplements"),
    ("POST", "/api/v1/runs/{id}/resume"),
    ("POST", "/api/v1/runs/{id}/cancel"),
    ("POST", "/api/v1/runs/{id}/approvals"),
    ("POST", "/api/v1/runs/{id}/answers"),
    ("GET", "/api/v1/runs/{id}/context"),
    ("GET", "/api/v1/runs/{id}/model-calls"),
    ("GET", "/api/v1/model-connections/"),
    ("POST", "/api/v1/model-connections/"),
    ("GET", "/api/v1/model-connections/{id}/"),
    ("PATCH", "/api/v1/model-connections/{id}/"),
    ("DELETE", "/api/v1/model-connections/{id}/"),
    ("GET", "/api/v1/tool-servers/"),
    ("POST", "/api/v1/tool-servers/"),
    ("GET", "/api/v1/tool-servers/{id}/"),
    ("PATCH", "/api/v1/tool-servers/{id}/"),
    ("DELETE", "/api/v1/tool-servers/{id}/"),
    # Fuzzed ids name no server, so nothing is called.
    ("POST", "/api/v1/tool-servers/{id}/refresh"),
]
# POST /api/models/discover and /api/v1/model-connections/test are left out: they call the
# provider; tests/models_app/test_schema.py fuzzes both with the provider answered from memory.
CALLS_A_PROVIDER = {("POST", "/api/v1/model-connections/test")}


def test_schema_is_served_and_lists_every_endpoint(api):
    response = api.get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {path for _, path in OPERATIONS} <= set(paths)
    assert "post" in paths["/api/models/discover"]


def test_docs_are_served_without_network(alice):
    from django.test import Client

    browser = Client()
    browser.force_login(alice)
    response = browser.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    # The start-up script is a file of its own (no inline script), and it names the schema.
    assert "/api/docs/?script=" in page
    assert "/api/schema/" in browser.get("/api/docs/?script=").content.decode()
    # Swagger UI comes from the sidecar's static files, not a CDN.
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "https://" not in page


CHECKS = SchemathesisConfig.from_dict(
    {
        "checks": {
            # Well-formed ids and usernames that name nothing are rightly refused (400/404):
            # a schema describes shapes, not which rows exist.
            "positive_data_acceptance": {"enabled": False},
            # A body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 before it is parsed.
            "negative_data_rejection": {
                "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 413, 415, 422]
            },
        }
    }
)


@functools.cache
def _schema():
    from django.test import override_settings

    from agentloom.wsgi import application

    # The schema is public only with DEBUG; reading it is not what these tests check.
    with override_settings(DEBUG=True):
        return schemathesis.openapi.from_wsgi(
            "/api/schema/?format=json", application, config=CHECKS
        )


@pytest.fixture
def wsgi_token(alice):
    """Alice's token, for requests sent through the WSGI app in this thread."""
    # As Django's test client does: a real WSGI request would close the test's connection.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield token_create(user=alice)[1]
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def test_every_v1_operation_is_fuzzed(db):
    documented = {
        (operation.method.upper(), operation.path)
        for operation in (result.ok() for result in _schema().get_all_operations())
        if operation.path.startswith("/api/v1/")
    }
    assert documented == set(OPERATIONS) | CALLS_A_PROVIDER


def _cases():
    """Yield (method, path, target, mode): every operation, on generated and on real ids."""
    for method, path in OPERATIONS:
        for target in ("existing", "generated") if "{id}" in path else ("generated",):
            for mode in GenerationMode:
                # With its only parameter pinned, a bodiless GET/POST has nothing to negate.
                if mode.is_negative and target == "existing" and not _has_input(method, path):
                    continue
                yield pytest.param(
                    method, path, target, mode, id=f"{method} {path} {target} {mode}"
                )


def _has_input(method: str, path: str) -> bool:
    if method == "POST" and path.endswith(("/retention", "/hold")):
        return True
    return method in ("PATCH",) or path.endswith(("/runs", "/supplements", "/members", "/messages"))


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path", "target", "mode"), list(_cases()))
def test_api_keeps_to_its_schema(method, path, target, mode, wsgi_token, space, run, other_space):
    """No 500, and every answer (status, content type, headers, body) is what the schema says."""
    operation = _schema()[path][method]
    fixed = None
    if target == "existing":
        agent = run.session.agent
        owner = {
            "spaces": space,
            "agents": agent,
            "sessions": run.session,
            "model-connections": agent.model_connection,
        }
        fixed = {"id": owner.get(path.split("/")[3], run).pk}
    strategy = operation.as_strategy(mode, path_parameters=fixed)

    @given(case=strategy)
    @settings(
        max_examples=5,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        case.call_and_validate(headers={"Authorization": f"Token {wsgi_token}"})

    check()


# --- what the probe found the schema did not say ------------------------------------------------


def _components(api) -> dict:
    # With DEBUG off the schema is served to signed-in callers only.
    return api.get("/api/schema/?format=json").json()["components"]["schemas"]


def test_sub_agents_declare_their_largest_count(api):
    from context_app.services.agents import MAX_SUB_AGENTS

    schemas = _components(api)
    for name in ("AgentCreateRequest", "PatchedAgentUpdateRequest"):
        assert schemas[name]["properties"]["sub_agents"]["maxItems"] == MAX_SUB_AGENTS


def test_opening_a_session_says_it_needs_an_agent_or_a_version(api):
    schema = _components(api)["SessionCreateRequest"]
    assert schema["anyOf"] == [{"required": ["agent_version"]}, {"required": ["agent"]}]


def _checked(operation, wsgi_token, **parts):
    """Send one hand-made case; return the response after checking it against the schema."""
    case = operation.Case(**parts)
    response = case.call(headers={"Authorization": f"Token {wsgi_token}"})
    case.validate_response(response)
    return response


@pytest.mark.parametrize(
    ("path", "name", "value"),
    [
        ("/api/v1/spaces/", "limit", "1.0"),
        ("/api/v1/spaces/", "offset", "0.0"),
        ("/api/v1/sessions/{id}/messages", "after", "0.0"),
        ("/api/v1/sessions/{id}/messages", "limit", "5.0"),
    ],
)
def test_an_integer_query_parameter_spelt_as_a_float_is_refused(path, name, value, wsgi_token, run):
    operation = _schema()[path]["GET"]
    path_parameters = {"id": run.session_id} if "{id}" in path else None
    response = _checked(operation, wsgi_token, query={name: value}, path_parameters=path_parameters)
    assert response.status_code == 400 and list(response.json()) == [name]


def test_more_sub_agents_than_declared_are_refused(wsgi_token, space):
    operation = _schema()["/api/v1/agents/"]["POST"]
    body = {
        "space": space.pk,
        "name": "many",
        "sub_agents": [{"name": f"helper_{n}"} for n in range(9)],
    }
    response = _checked(operation, wsgi_token, body=body, media_type="application/json")
    assert response.status_code == 400 and list(response.json()) == ["sub_agents"]


def test_a_session_without_agent_or_version_is_refused(wsgi_token):
    operation = _schema()["/api/v1/sessions/"]["POST"]
    response = _checked(operation, wsgi_token, body={"title": "t"}, media_type="application/json")
    assert response.status_code == 400 and list(response.json()) == ["agent_version"]


# The operations the probe caught, fuzzed harder than the sweep above: both data modes, more
# examples, still bounded.
FOCUSED = [
    ("POST", "/api/v1/agents/"),
    ("PATCH", "/api/v1/agents/{id}/"),
    ("POST", "/api/v1/sessions/"),
    ("GET", "/api/v1/sessions/{id}/messages"),
    ("GET", "/api/v1/spaces/"),
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(GenerationMode), ids=str)
@pytest.mark.parametrize(("method", "path"), FOCUSED)
def test_the_probed_operations_keep_to_their_schema(method, path, mode, wsgi_token, run):
    operation = _schema()[path][method]
    fixed = None
    if "{id}" in path:
        owner = run.session.agent if "/agents/" in path else run.session
        fixed = {"id": owner.pk}
    strategy = operation.as_strategy(mode, path_parameters=fixed)

    @given(case=strategy)
    @settings(
        max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case):
        case.call_and_validate(headers={"Authorization": f"Token {wsgi_token}"})

    check()


# --- the schema tells the truth about refusals ------------------------------------------------

# Letters, every kind of whitespace `str.strip()` removes, controls, invisible format characters,
# NUL, characters outside the Basic Multilingual Plane.
_ALPHABET = (
    "aZ é中😀"
    " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2007\u2028\u3000"
    "\x00\x07\x7f\x9f\xad\u200b\u202e\ufeff\U000e0041"
)


@pytest.mark.parametrize("trimmed", [True, False], ids=["trimmed", "kept"])
@pytest.mark.parametrize("blank", [True, False], ids=["blank", "not-blank"])
@pytest.mark.parametrize("single_line", [True, False], ids=["single-line", "multi-line"])
def test_a_text_field_accepts_exactly_what_its_pattern_declares(trimmed, blank, single_line):
    import jsonschema_rs
    from hypothesis import strategies as st

    from agentloom.api import TextField
    from agentloom.validation import text_pattern

    field = TextField(trim_whitespace=trimmed, allow_blank=blank, single_line=single_line)
    declared = jsonschema_rs.validator_for(
        {
            "type": "string",
            "pattern": text_pattern(trimmed=trimmed, blank=blank, single_line=single_line),
        }
    )

    @given(st.text(alphabet=_ALPHABET, max_size=8))
    @settings(max_examples=400, deadline=None, database=None)
    def agree(value):
        try:
            field.run_validation(value)
            accepted = True
        except serializers.ValidationError:
            accepted = False
        assert declared.is_valid(value) == accepted, repr(value)

    agree()


def test_single_line_text_refuses_every_control_and_format_character_of_the_plane():
    import unicodedata

    from agentloom.validation import is_single_line

    refused = {
        chr(point)
        for point in range(0x10000)
        if unicodedata.category(chr(point)) in ("Cc", "Cf", "Zl", "Zp")
    }
    assert all(not is_single_line(f"a{char}b") for char in refused)
    assert all(
        is_single_line(f"a{chr(point)}b")
        for point in range(0x10000)
        if chr(point) not in refused and not 0xD800 <= point <= 0xDFFF
    )
    assert is_single_line("a\U0001f600b")


def test_text_fields_declare_their_rules(api):
    from agentloom.validation import text_pattern

    schemas = _components(api)
    name = schemas["SpaceCreateRequest"]["properties"]["name"]
    assert name["pattern"] == text_pattern(trimmed=True, blank=False)
    prompt = schemas["AgentCreateRequest"]["properties"]["system_prompt"]
    assert prompt["pattern"] == text_pattern(trimmed=False, blank=True)
    for component, field in (
        ("ModelConnectionCreateRequest", "name"),
        ("PatchedModelConnectionUpdateRequest", "name"),
    ):
        declared = schemas[component]["properties"][field]["pattern"]
        assert declared == text_pattern(trimmed=True, blank=False, single_line=True)
    title = schemas["SessionCreateRequest"]["properties"]["title"]
    assert title["pattern"] == text_pattern(trimmed=True, blank=True, single_line=True)
    # What no pattern can say, a description does.
    username = schemas["MembershipCreateRequest"]["properties"]["username"]["description"]
    assert "names no user" in username
    connection = schemas["AgentCreateRequest"]["properties"]["model_connection"]["description"]
    assert "another space" in connection


def test_opening_a_session_needs_a_body(api):
    operation = api.get("/api/schema/?format=json").json()["paths"]["/api/v1/sessions/"]["post"]
    assert operation["requestBody"]["required"] is True


# What a request that keeps to the schema is never refused for.
DECLARED_REFUSALS = (
    "Null characters are not allowed.",
    "This field may not be blank.",
    "Must not contain control characters.",
    "Give agent_version, or agent for its latest version.",
)
WRITES = [
    ("POST", "/api/v1/spaces/"),
    ("POST", "/api/v1/spaces/{id}/members"),
    ("GET", "/api/v1/spaces/{id}/retention"),
    ("POST", "/api/v1/spaces/{id}/retention"),
    ("POST", "/api/v1/agents/"),
    ("PATCH", "/api/v1/agents/{id}/"),
    ("POST", "/api/v1/sessions/"),
    ("POST", "/api/v1/sessions/{id}/runs"),
    ("POST", "/api/v1/runs/{id}/supplements"),
    ("POST", "/api/v1/model-connections/"),
    ("PATCH", "/api/v1/model-connections/{id}/"),
]


def _messages(errors) -> list[str]:
    if isinstance(errors, dict):
        return [text for value in errors.values() for text in _messages(value)]
    if isinstance(errors, list):
        return [text for value in errors for text in _messages(value)]
    return [str(errors)]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path"), WRITES)
def test_requests_that_keep_to_the_schema_are_not_refused_for_what_it_declares(
    method, path, wsgi_token, space, run
):
    operation = _schema()[path][method]
    owners = {
        "spaces": space,
        "agents": run.session.agent,
        "sessions": run.session,
        "runs": run,
        "model-connections": run.session.agent.model_connection,
    }
    fixed = {"id": owners[path.split("/")[3]].pk} if "{id}" in path else None
    strategy = operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed)

    @given(case=strategy)
    @settings(
        max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case):
        response = case.call(headers={"Authorization": f"Token {wsgi_token}"})
        assert response.status_code != 500
        if response.status_code == 400:
            refused = [m for m in _messages(response.json()) if m in DECLARED_REFUSALS]
            assert not refused, (case.body, response.json())

    check()
