"""The OpenAPI schema and docs are served, and the API keeps to the schema (schemathesis)."""

from __future__ import annotations

import functools

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token

from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance


def test_schema_is_served_and_lists_every_endpoint(anon):
    response = anon.get("/api/schema/?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/spaces/",
        "/api/v1/spaces/{id}/members",
        "/api/v1/agents/",
        "/api/v1/agents/{id}/",
        "/api/v1/agents/{id}/publish",
        "/api/v1/agents/{id}/versions/",
        "/api/v1/sessions/",
        "/api/v1/sessions/{id}/",
        "/api/v1/sessions/{id}/runs",
        "/api/v1/sessions/{id}/messages",
        "/api/v1/sessions/{id}/views/",
        "/api/v1/runs/{id}/",
        "/api/v1/runs/{id}/supplements",
        "/api/v1/runs/{id}/resume",
        "/api/v1/runs/{id}/cancel",
        "/api/v1/runs/{id}/context",
        "/api/v1/runs/{id}/model-calls",
    ):
        assert path in paths


def test_docs_are_served_without_network(anon):
    response = anon.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/api/schema/" in page
    assert "//cdn." not in page and "unpkg.com" not in page


OPERATIONS = [
    ("GET", "/api/v1/spaces/"),
    ("POST", "/api/v1/spaces/"),
    ("POST", "/api/v1/spaces/{id}/members"),
    ("GET", "/api/v1/agents/"),
    ("POST", "/api/v1/agents/"),
    ("GET", "/api/v1/agents/{id}/"),
    ("PATCH", "/api/v1/agents/{id}/"),
    ("POST", "/api/v1/agents/{id}/publish"),
    ("GET", "/api/v1/agents/{id}/versions/"),
    ("GET", "/api/v1/sessions/"),
    ("POST", "/api/v1/sessions/"),
    ("GET", "/api/v1/sessions/{id}/"),
    ("GET", "/api/v1/sessions/{id}/runs"),
    ("POST", "/api/v1/sessions/{id}/runs"),
    ("GET", "/api/v1/sessions/{id}/messages"),
    ("GET", "/api/v1/sessions/{id}/views/"),
    ("GET", "/api/v1/runs/{id}/"),
    ("POST", "/api/v1/runs/{id}/supplements"),
    ("POST", "/api/v1/runs/{id}/resume"),
    ("POST", "/api/v1/runs/{id}/cancel"),
    ("GET", "/api/v1/runs/{id}/context"),
    ("GET", "/api/v1/runs/{id}/model-calls"),
]


@functools.cache
def _schema():
    from agentloom.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


@pytest.fixture
def wsgi_token(alice):
    """Alice's token, for requests sent through the WSGI app in this thread."""
    # As Django's test client does: a real WSGI request would close the test's connection.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield Token.objects.create(user=alice).key
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def test_every_v1_operation_is_fuzzed(db):
    from agentloom.wsgi import application

    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    documented = {
        (operation.method.upper(), operation.path)
        for operation in (result.ok() for result in schema.get_all_operations())
        if operation.path.startswith("/api/v1/") and "model-connections" not in operation.path
    }
    assert documented == set(OPERATIONS)


def _cases():
    """Yield (method, path, target, mode): every operation, on generated and on real ids."""
    for method, path in OPERATIONS:
        for target in ("existing", "generated") if "{id}" in path else ("generated",):
            for mode in GenerationMode:
                # With its only parameter pinned, a bodiless GET/POST has nothing to negate.
                if mode.is_negative and target == "existing" and not _has_input(method, path):
                    continue
                yield pytest.param(method, path, target, mode, id=f"{method} {path} {target} {mode}")


def _has_input(method: str, path: str) -> bool:
    return method in ("PATCH",) or path.endswith(("/runs", "/supplements", "/members", "/messages"))


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path", "target", "mode"), list(_cases()))
def test_api_keeps_to_its_schema(method, path, target, mode, wsgi_token, space, run, other_space):
    """No 500, and every answer (status, content type, headers, body) is what the schema says."""
    operation = _schema()[path][method]
    fixed = None
    if target == "existing":
        owner = {"spaces": space, "agents": run.session.agent, "sessions": run.session}
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
        case.call_and_validate(
            headers={"Authorization": f"Token {wsgi_token}"},
            # Well-formed ids and usernames that name nothing are rightly refused (400/404):
            # a schema describes shapes, not which rows exist.
            excluded_checks=[positive_data_acceptance],
        )

    check()
