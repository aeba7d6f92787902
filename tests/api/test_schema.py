"""The OpenAPI schema and docs are served, and the API keeps to the schema (schemathesis)."""

from __future__ import annotations

import functools

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from agentloom.spaces.tokens import token_create

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
    ("DELETE", "/api/v1/sessions/{id}/"),
    ("GET", "/api/v1/sessions/{id}/runs"),
    ("POST", "/api/v1/sessions/{id}/runs"),
    ("GET", "/api/v1/sessions/{id}/messages"),
    ("GET", "/api/v1/sessions/{id}/views/"),
    ("POST", "/api/v1/sessions/{id}/views/{revision}/revoke"),
    ("GET", "/api/v1/runs/{id}/"),
    ("POST", "/api/v1/runs/{id}/supplements"),
    ("POST", "/api/v1/runs/{id}/resume"),
    ("POST", "/api/v1/runs/{id}/cancel"),
    ("GET", "/api/v1/runs/{id}/context"),
    ("GET", "/api/v1/runs/{id}/model-calls"),
    ("GET", "/api/v1/model-connections/"),
    ("POST", "/api/v1/model-connections/"),
    ("GET", "/api/v1/model-connections/{id}/"),
    ("PATCH", "/api/v1/model-connections/{id}/"),
    ("DELETE", "/api/v1/model-connections/{id}/"),
]
# POST /api/models/discover is left out: it calls the provider, and fuzzing it means network I/O.


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
    assert documented == set(OPERATIONS)


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
