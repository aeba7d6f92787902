"""The model page asks a self-hosted server whether it tokenizes: the connection test says so,
and the test and the listing suggest the `server` estimator (automatic) when it does."""

from __future__ import annotations

import pytest

from tests.support.llama_double import LlamaServerDouble

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_hosts")]

TEST_URL = "/api/v1/model-connections/test"
DISCOVER_URL = "/api/models/discover"


@pytest.fixture
def llama():
    with LlamaServerDouble("llama-cpp-python", n_ctx=4_096) as double:
        yield double


def connection_test(api, double):
    body = {"provider": "openai_compatible", "base_url": double.base_url, "model_id": "smollm2"}
    response = api.post(TEST_URL, body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_test_says_whether_the_server_tokenizes(api, llama):
    body = connection_test(api, llama)
    assert body["ok"] is True
    assert body["tokenizer"] == "llama-cpp-python:/extras/tokenize/count"
    assert body["estimator"] == "server"
    assert llama.tokenize_calls >= 1


def test_a_server_that_does_not_tokenize_suggests_nothing(api, llama):
    llama.tokenizers = set()
    body = connection_test(api, llama)
    assert body["ok"] is True
    assert body["tokenizer"] is None and body["estimator"] is None


def test_the_listing_suggests_the_server_tokenizer(api, llama):
    response = api.post(
        DISCOVER_URL,
        {"provider": "openai_compatible", "base_url": llama.base_url},
        format="json",
    )
    assert response.status_code == 200, response.content
    (model,) = [m for m in response.json()["models"] if m["chat"]]
    assert model["estimator"] == "server"
    llama.tokenizers = set()
    response = api.post(
        DISCOVER_URL,
        {"provider": "openai_compatible", "base_url": llama.base_url},
        format="json",
    )
    assert [m["estimator"] for m in response.json()["models"]] == ["bytes"]


def test_the_suggestion_is_saved_as_automatic(api, space, llama):
    body = {
        "space": space.pk,
        "name": "smol",
        "provider": "openai_compatible",
        "base_url": llama.base_url,
        "model_id": "smollm2",
        "estimator": "server",
        "estimator_source": "auto",
    }
    response = api.post("/api/v1/model-connections", body, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["estimator"], response.json()["estimator_source"]) == (
        "server",
        "auto",
    )
