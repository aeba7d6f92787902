"""POST /api/models/discover against a real HTTP provider double on 127.0.0.1."""

from __future__ import annotations

import logging

import pytest

from models_app.models import ModelConnection
from models_app.services.connections import connection_create
from tests.factories import make_space, make_user
from tests.models_app.conftest import SECRET_KEY

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_hosts")]

URL = "/api/models/discover"


@pytest.fixture
def listed(provider_double):
    provider_double.models = [
        {"id": "qwen-72b", "object": "model", "context_length": 131_072, "max_tokens": 8_192},
        {"id": "text-embedding-3-small", "object": "model"},
        {"id": "plain-model", "object": "model"},
    ]
    return provider_double


def discover(client, double, **extra):
    body = {"provider": "openai_compatible", "base_url": double.base_url, **extra}
    return client.post(URL, body, format="json")


def test_lists_models_with_their_window_and_source(api, listed, caplog):
    caplog.set_level(logging.DEBUG)
    response = discover(api, listed, api_key=SECRET_KEY)
    assert response.status_code == 200, response.content
    models = {model["id"]: model for model in response.json()["models"]}
    assert list(models) == ["plain-model", "qwen-72b", "text-embedding-3-small"]
    assert models["qwen-72b"] == {
        "id": "qwen-72b",
        "chat": True,
        "context_window": 131_072,
        "max_output_tokens": 4_096,
        "max_output_cap": 8_192,
        "window_source": "provider",
        "source_url": listed.base_url + "/models",
        "verified_on": models["qwen-72b"]["verified_on"],
        "demo": False,
        "tokenizer": None,
        "estimator": "bytes",
        "warning": None,
        "retired": None,
    }
    assert models["plain-model"]["window_source"] == "platform_default"
    assert models["plain-model"]["context_window"] == 32_768
    assert models["text-embedding-3-small"]["chat"] is False
    # The list, then the server's own window routes at its origin (absent here: 404, silent),
    # then its tokenizer routes (`test_the_listing_suggests_the_server_tokenizer`).
    request, *probes = listed.requests
    assert (request.method, request.path) == ("GET", "/v1/models")
    assert [probe.path for probe in probes][:2] == ["/props", "/api/v0/models"]
    assert request.headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert SECRET_KEY not in response.content.decode() and SECRET_KEY not in caplog.text
    assert not ModelConnection.objects.exists()


def test_a_trailing_slash_is_accepted(api, listed):
    body = {"provider": "openai_compatible", "base_url": listed.base_url + "/"}
    assert api.post(URL + "/", body, format="json").status_code == 200


def test_local_answers_the_demo_model_without_http(api):
    response = api.post(URL, {"provider": "local"}, format="json")
    assert response.status_code == 200
    (model,) = response.json()["models"]
    assert (model["id"], model["demo"], model["chat"]) == ("local-demo", True, True)


def test_a_provider_refusal_is_a_502_without_its_body(api, provider_double, caplog):
    caplog.set_level(logging.DEBUG)
    provider_double.reply(
        path="/v1/models",
        status=401,
        json={"error": {"message": f"Incorrect API key provided: {SECRET_KEY}"}},
    )
    response = discover(api, provider_double, api_key=SECRET_KEY)
    assert response.status_code == 502
    assert response.json() == {"detail": "The provider rejected the credentials. (HTTP 401)"}
    assert SECRET_KEY not in caplog.text and "Incorrect API key" not in caplog.text


def test_a_redirect_is_not_followed(api, provider_double):
    provider_double.redirect("/v1/models", to="/v1/elsewhere")
    response = discover(api, provider_double, api_key=SECRET_KEY)
    assert response.status_code == 502
    assert "redirect" in response.json()["detail"]
    assert provider_double.hits("/v1/elsewhere") == 0


def test_an_answer_that_is_no_model_list_is_a_502(api, provider_double):
    provider_double.models_body = {"hello": "world"}
    response = discover(api, provider_double)
    assert response.status_code == 502
    assert response.json() == {"detail": "The provider's answer is not a list of models."}


def test_private_hosts_are_refused_unless_allowed(api, provider_double, settings):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = False
    response = discover(api, provider_double, api_key=SECRET_KEY)
    assert response.status_code == 400 and list(response.json()) == ["base_url"]
    assert provider_double.requests == []


@pytest.mark.parametrize(
    "base_url",
    ["http://169.254.169.254/latest", "http://metadata.google.internal/v1", "http://[fe80::1]/v1"],
)
def test_metadata_addresses_are_always_refused(api, base_url):
    response = api.post(URL, {"provider": "openai_compatible", "base_url": base_url}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["base_url"]


# --- the stored key ----------------------------------------------------------------------------


@pytest.fixture
def saved(alice, space, listed):
    return connection_create(
        user=alice,
        space=space,
        name="proxy",
        provider="openai_compatible",
        base_url=listed.base_url,
        api_key=SECRET_KEY,
        model_id="qwen-72b",
    )


def test_a_blank_key_uses_the_stored_one_for_the_same_endpoint(api, listed, saved):
    response = discover(api, listed, api_key="", resource_id=saved.pk)
    assert response.status_code == 200
    assert listed.requests[0].headers["authorization"] == f"Bearer {SECRET_KEY}"
    assert SECRET_KEY not in response.content.decode()


def test_a_new_key_wins_and_is_not_saved(api, listed, saved):
    response = discover(api, listed, api_key="sk-typed-now", resource_id=saved.pk)
    assert response.status_code == 200
    assert listed.requests[0].headers["authorization"] == "Bearer sk-typed-now"
    assert ModelConnection.objects.get(pk=saved.pk).api_key == SECRET_KEY


def test_the_stored_key_never_goes_to_another_endpoint(api, listed, saved):
    with_path = api.post(
        URL,
        {
            "provider": "openai_compatible",
            "base_url": listed.origin + "/other",
            "resource_id": saved.pk,
        },
        format="json",
    )
    other_provider = api.post(
        URL,
        {"provider": "deepseek", "base_url": listed.base_url, "resource_id": saved.pk},
        format="json",
    )
    for response in (with_path, other_provider):
        assert response.status_code == 400 and list(response.json()) == ["api_key"]
    assert listed.requests == []


def test_another_spaces_connection_is_not_found(bob_api, listed, saved):
    response = discover(bob_api, listed, resource_id=saved.pk)
    assert response.status_code == 404
    assert listed.requests == []


def test_a_member_may_not_use_the_stored_key(member_api, listed, saved):
    assert discover(member_api, listed, resource_id=saved.pk).status_code == 403
    assert listed.requests == []


def test_a_caller_who_administers_no_space_is_refused(listed, db):
    from tests.api.factories import client_for

    nobody = make_user("nobody")
    make_space(name="Readers", members=[nobody])
    assert discover(client_for(nobody), listed).status_code == 403
    assert listed.requests == []


@pytest.mark.parametrize(
    "body",
    [
        {"provider": "anthropic"},
        {},
        {"provider": "openai_compatible"},
        {"provider": "openai_compatible", "base_url": 5},
        {"provider": "local", "resource_id": "abc"},
        {"provider": "local", "resource_id": 0},
        {"provider": "local", "api_key": ["x"]},
        {"provider": "local", "colour": "blue"},
    ],
)
def test_bad_input_is_a_400(api, body):
    response = api.post(URL, body, format="json")
    assert response.status_code == 400, response.content


@pytest.mark.parametrize(
    "base_url",
    [
        "http://xn--a.com/v1",
        "http://xn--/v1",
        "https://xn--a/v1",
        "http://exa mple.com/v1",
        "http://-bad-.com",
        "http://a..b",
    ],
)
def test_an_invalid_host_is_a_400_naming_base_url(api, base_url):
    response = api.post(URL, {"provider": "openai_compatible", "base_url": base_url}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["base_url"]


@pytest.mark.parametrize("provider", ["openai", "deepseek"])
def test_a_blank_key_for_a_provider_that_needs_one_is_refused_before_any_call(api, provider):
    response = api.post(URL, {"provider": provider, "api_key": "  "}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "api_key": ["Enter the API key first: this provider lists its models only for a key."]
    }
