"""POST /api/v1/model-connections/test: one tiny chat request, its latency, or why it failed."""

from __future__ import annotations

import logging
import socket

import pytest

from models_app.models import ModelConnection
from models_app.services.connections import connection_create
from tests.models_app.conftest import SECRET_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_hosts")]

URL = "/api/v1/model-connections/test"


def dead_port_url() -> str:
    """Return a loopback URL where nothing listens (a port just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test(client, base_url, **extra):
    body = {"provider": "openai_compatible", "base_url": base_url, "model_id": "m-1", **extra}
    return client.post(URL, body, format="json")


test.__test__ = False  # a helper, not a test


def test_a_good_key_answers_with_its_latency(api, provider_double, caplog):
    caplog.set_level(logging.DEBUG)
    provider_double.reply_chat(content="OK", model="m-1-2026")
    response = test(api, provider_double.base_url, api_key=SECRET_KEY)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ok"] is True and body["model"] == "m-1-2026"
    assert isinstance(body["latency_ms"], int) and body["latency_ms"] >= 0
    assert body["kind"] is None and body["detail"] is None
    # Then the tokenizer routes are asked (`test_the_test_says_whether_the_server_tokenizes`).
    (request,) = [r for r in provider_double.requests if r.path == "/v1/chat/completions"]
    assert request.json["model"] == "m-1" and request.json["max_tokens"] <= 16
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert SECRET_KEY not in response.content.decode() and SECRET_KEY not in caplog.text


def test_a_bad_key_is_told_in_words_once(api, provider_double):
    provider_double.reply(status=401, json={"error": {"message": "bad key sk-leak"}})
    response = test(api, provider_double.base_url, api_key="sk-wrong")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is False and body["kind"] == "auth" and body["status"] == 401
    assert body["detail"] == "The provider rejected the credentials. (HTTP 401)"
    assert "sk-leak" not in response.content.decode()
    assert len(provider_double.requests) == 1  # a test is never retried


def test_a_dead_port_is_told_in_words(api):
    body = test(api, dead_port_url(), api_key=SECRET_KEY).json()
    assert body["ok"] is False and body["kind"] == "network"
    assert body["detail"] == "The provider could not be reached."


def test_the_stored_key_is_used_for_its_own_endpoint_only(api, alice, space, provider_double):
    connection = connection_create(
        user=alice,
        space=space,
        name="Proxy",
        provider=ModelConnection.Provider.OPENAI_COMPATIBLE,
        base_url=provider_double.base_url,
        api_key=SECRET_KEY,
        model_id="m-1",
    )
    provider_double.reply_chat(content="OK")
    assert test(api, provider_double.base_url, resource_id=connection.pk).json()["ok"] is True
    assert provider_double.requests[0].headers["authorization"] == f"Bearer {SECRET_KEY}"
    moved = test(api, dead_port_url(), resource_id=connection.pk)
    assert moved.status_code == 400 and "api_key" in moved.json()


def test_bad_input_names_its_field_and_members_are_refused(api, member_api, provider_double):
    missing = test(api, provider_double.base_url, model_id="")
    assert missing.status_code == 400 and "model_id" in missing.json()
    no_key = api.post(URL, {"provider": "openai", "model_id": "gpt-4o"}, format="json")
    assert no_key.status_code == 400 and "api_key" in no_key.json()
    assert test(member_api, provider_double.base_url).status_code == 403
    assert provider_double.requests == []


def test_the_local_demo_model_answers_offline(api):
    body = api.post(URL, {"provider": "local"}, format="json").json()
    assert body["ok"] is True and body["model"] == "local-demo"
