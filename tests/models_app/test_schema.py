"""The model-connection and discovery endpoints keep to their OpenAPI schema (schemathesis)."""

from __future__ import annotations

import functools

import httpx
import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig

from agentloom.providers import secure_client
from agentloom.spaces.services.tokens import token_create
from models_app.services import discovery
from tests.factories import make_connection

OPERATIONS = [
    ("GET", "/api/v1/model-connections/"),
    ("POST", "/api/v1/model-connections/"),
    ("GET", "/api/v1/model-connections/{id}/"),
    ("PATCH", "/api/v1/model-connections/{id}/"),
    ("DELETE", "/api/v1/model-connections/{id}/"),
    ("POST", "/api/models/discover"),
    ("POST", "/api/v1/model-connections/test"),
]

CHECKS = SchemathesisConfig.from_dict(
    {
        "checks": {
            # Well-formed ids that name nothing are rightly refused (404): a schema describes
            # shapes, not which rows exist; likewise budgets that do not add up (400).
            "positive_data_acceptance": {"enabled": False},
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
def wsgi_token(alice, space):
    """Alice's token (admin of `space`), for requests sent through the WSGI app in this thread."""
    # As Django's test client does: a real WSGI request would close the test's connection.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield token_create(user=alice)[1]
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def offline_provider(monkeypatch, settings):
    """Answer discoveries and test chats from memory: generated base URLs must reach no network."""
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "m", "context_length": 65_536}]})

    real = discovery.discover_models

    def offline(*args, **kwargs):
        kwargs["client_factory"] = lambda: secure_client(transport=httpx.MockTransport(handler))
        return real(*args, **kwargs)

    monkeypatch.setattr(discovery, "discover_models", offline)

    def chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "OK"}}]})

    real_gateway = discovery._test_gateway

    def offline_gateway(provider, base_url, key, model, client_factory):
        transport = httpx.MockTransport(chat)
        return real_gateway(
            provider, base_url, key, model, lambda: secure_client(transport=transport)
        )

    monkeypatch.setattr(discovery, "_test_gateway", offline_gateway)


def test_every_operation_is_documented(db):
    documented = {
        (operation.method.upper(), operation.path)
        for operation in (result.ok() for result in _schema().get_all_operations())
        if "model-connections" in operation.path or operation.path.startswith("/api/models/")
    }
    assert documented == set(OPERATIONS)


def _cases():
    for method, path in OPERATIONS:
        for target in ("existing", "generated") if "{id}" in path else ("generated",):
            for mode in GenerationMode:
                if mode.is_negative and target == "existing" and method in ("GET", "DELETE"):
                    continue  # nothing left to negate once the id is pinned
                yield pytest.param(
                    method, path, target, mode, id=f"{method} {path} {target} {mode}"
                )


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "target", "mode"), list(_cases()))
def test_the_api_keeps_to_its_schema(
    method, path, target, mode, wsgi_token, space, offline_provider
):
    """No 500, and every answer (status, content type, body) is what the schema says."""
    operation = _schema()[path][method]
    fixed = None
    if target == "existing":
        fixed = {"id": make_connection(space, api_key="sk-fuzz").pk}
    strategy = operation.as_strategy(mode, path_parameters=fixed)

    @given(case=strategy)
    @settings(
        max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def check(case):
        case.call_and_validate(headers={"Authorization": f"Token {wsgi_token}"})

    check()
