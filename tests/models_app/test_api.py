"""The model-connection REST endpoints: shapes, errors, access, and a key that never comes back."""

from __future__ import annotations

import json
import logging

import pytest

from models_app.models import ModelConnection
from tests.factories import make_agent, make_connection, make_version
from tests.models_app.conftest import SECRET_KEY

pytestmark = pytest.mark.django_db

LIST = "/api/v1/model-connections/"
PROXY = "https://llm.example.com/v1"
FIELDS = {
    "id",
    "space",
    "name",
    "thinking",
    "reasoning_effort",
    "reasoning_passback",
    "learned_reasoning",
    "learned_window",
    "learned_window_evidence",
    "learned_window_at",
    "prices",
    "retired",
    "provider",
    "demo",
    "base_url",
    "base_url_punycode",
    "has_api_key",
    "model_id",
    "context_window",
    "max_output_tokens",
    "max_output_cap",
    "safety_margin_tokens",
    "num_ctx",
    "window_source",
    "source_url",
    "verified_on",
    "estimator",
    "estimator_source",
    "effective_input_budget",
    "created_at",
    "updated_at",
}


def detail(pk) -> str:
    return f"{LIST}{pk}/"


def body(response) -> str:
    return response.content.decode()


@pytest.fixture
def openai_body(space):
    return {
        "space": space.pk,
        "name": "OpenAI",
        "provider": "openai",
        "api_key": SECRET_KEY,
        "model_id": "gpt-4o",
    }


@pytest.fixture
def stored(api, openai_body):
    response = api.post(LIST, openai_body, format="json")
    assert response.status_code == 201, response.content
    return ModelConnection.objects.get(pk=response.json()["id"])


# --- create, read, list ------------------------------------------------------------------------


def test_create_answers_the_connection_without_its_key(api, openai_body, caplog):
    caplog.set_level(logging.DEBUG)
    response = api.post(LIST, openai_body, format="json")
    assert response.status_code == 201
    data = response.json()
    assert set(data) == FIELDS
    assert data["has_api_key"] is True
    assert "api_key" not in data and SECRET_KEY not in body(response)
    assert data["base_url"] == "https://api.openai.com/v1"
    assert data["window_source"] == "official_manifest"
    assert data["source_url"].startswith("https://platform.openai.com/")
    assert data["verified_on"] == "2026-11-30"
    assert (data["context_window"], data["max_output_tokens"], data["max_output_cap"]) == (
        128_000,
        4_096,
        16_384,
    )
    assert data["effective_input_budget"] == 128_000 - 4_096 - 1_024
    assert data["demo"] is False
    assert SECRET_KEY not in caplog.text


def test_values_without_a_source_are_manual(api, space):
    response = api.post(
        LIST,
        {
            "space": space.pk,
            "name": "proxy",
            "provider": "openai_compatible",
            "base_url": PROXY,
            "model_id": "m",
            "context_window": 65_536,
        },
        format="json",
    )
    assert response.status_code == 201
    data = response.json()
    assert (data["window_source"], data["source_url"], data["has_api_key"]) == (
        "manual",
        None,
        False,
    )


def test_local_is_flagged_as_the_demo_model(api, space):
    response = api.post(
        LIST, {"space": space.pk, "name": "demo", "provider": "local"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["demo"] is True
    assert response.json()["model_id"] == "local-demo"


def test_list_is_paginated_and_scoped_to_the_callers_spaces(api, space, other_space):
    for index in range(3):
        make_connection(space, name=f"c{index}")
    make_connection(other_space, name="theirs")
    page = api.get(LIST + "?limit=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2
    assert page["next"] and page["previous"] is None
    assert {row["name"] for row in api.get(LIST + "?offset=2").json()["results"]} == {"c2"}
    assert api.get(LIST + "?limit=0").status_code == 400


def test_members_read_but_do_not_write(member_api, stored, space):
    assert member_api.get(LIST).json()["count"] == 1
    assert member_api.get(detail(stored.pk)).status_code == 200
    assert member_api.patch(detail(stored.pk), {"name": "x"}, format="json").status_code == 403
    assert member_api.delete(detail(stored.pk)).status_code == 403
    response = member_api.post(
        LIST, {"space": space.pk, "name": "mine", "provider": "local"}, format="json"
    )
    assert response.status_code == 403


def test_another_space_is_not_found(bob_api, stored, space):
    assert bob_api.get(LIST).json()["count"] == 0
    for response in (
        bob_api.get(detail(stored.pk)),
        bob_api.patch(detail(stored.pk), {"name": "x"}, format="json"),
        bob_api.delete(detail(stored.pk)),
        bob_api.post(LIST, {"space": space.pk, "name": "x", "provider": "local"}, format="json"),
    ):
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found."}


def test_anonymous_callers_are_refused(anon, stored):
    for response in (
        anon.get(LIST),
        anon.post(LIST, {}, format="json"),
        anon.get(detail(stored.pk)),
        anon.patch(detail(stored.pk), {}, format="json"),
        anon.delete(detail(stored.pk)),
        anon.post("/api/models/discover", {"provider": "local"}, format="json"),
    ):
        assert response.status_code == 401


def test_paths_match_with_or_without_the_final_slash(api, stored):
    assert api.get(LIST.rstrip("/")).status_code == 200
    assert api.get(detail(stored.pk).rstrip("/")).status_code == 200
    for bad in ("abc", "0", "99999999999999999999", str(stored.pk + 1000)):
        response = api.get(detail(bad))
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}


# --- update ------------------------------------------------------------------------------------


def test_patch_with_a_blank_key_keeps_it(api, stored):
    response = api.patch(detail(stored.pk), {"name": "renamed", "api_key": ""}, format="json")
    assert response.status_code == 200
    assert response.json()["has_api_key"] is True and SECRET_KEY not in body(response)
    assert ModelConnection.objects.get(pk=stored.pk).api_key == SECRET_KEY


def test_patch_to_another_url_needs_the_key_again(api, stored, caplog):
    caplog.set_level(logging.DEBUG)
    response = api.patch(
        detail(stored.pk),
        {"provider": "openai_compatible", "base_url": "https://collector.example.net/v1"},
        format="json",
    )
    assert response.status_code == 400
    assert list(response.json()) == ["api_key"]
    assert SECRET_KEY not in body(response) and SECRET_KEY not in caplog.text
    response = api.patch(
        detail(stored.pk),
        {
            "provider": "openai_compatible",
            "base_url": "https://collector.example.net/v1",
            "api_key": "sk-other",
        },
        format="json",
    )
    assert response.status_code == 200
    assert ModelConnection.objects.get(pk=stored.pk).api_key == "sk-other"


def test_patch_of_a_window_value_makes_it_manual(api, stored):
    response = api.patch(detail(stored.pk), {"max_output_tokens": 8_000}, format="json")
    assert response.status_code == 200
    data = response.json()
    assert (data["max_output_tokens"], data["window_source"]) == (8_000, "manual")
    assert data["effective_input_budget"] == 128_000 - 8_000 - 1_024


def test_patch_refuses_moving_to_another_space(api, stored, other_space):
    response = api.patch(detail(stored.pk), {"space": other_space.pk}, format="json")
    assert response.status_code == 400 and list(response.json()) == ["space"]


# --- delete ------------------------------------------------------------------------------------


def test_delete(api, stored):
    assert api.delete(detail(stored.pk)).status_code == 204
    assert api.get(detail(stored.pk)).status_code == 404


def test_delete_of_a_connection_a_published_version_uses_conflicts(api, alice, space):
    connection = make_connection(space)
    make_version(make_agent(space, alice, connection=connection, name="Helper"))
    response = api.delete(detail(connection.pk))
    assert response.status_code == 409
    assert "Published" in response.json()["detail"]


def test_delete_of_a_connection_a_draft_uses_conflicts(api, alice, space):
    connection = make_connection(space)
    make_agent(space, alice, connection=connection, name="Drafty")
    response = api.delete(detail(connection.pk))
    assert response.status_code == 409
    assert "Draft" in response.json()["detail"]


# --- bad input ---------------------------------------------------------------------------------

BAD_INPUT = [
    ("context_window", "lots"),
    ("context_window", 1.5),
    ("context_window", -1),
    ("context_window", 0),
    ("context_window", 10**30),
    ("context_window", [1]),
    ("context_window", 2_000),
    ("max_output_tokens", 20_000),
    ("max_output_tokens", -4),
    ("max_output_cap", {"a": 1}),
    ("safety_margin_tokens", -1),
    ("safety_margin_tokens", 500_000),
    ("provider", "anthropic"),
    ("provider", None),
    ("name", ""),
    ("name", ["x"]),
    ("name", "x" * 500),
    ("base_url", "javascript:alert(1)"),
    ("base_url", 12),
    ("base_url", "http://169.254.169.254/latest"),
    ("base_url", "http://xn--a.com/v1"),
    ("base_url", "http://xn--/v1"),
    # Host names are checked label by label when the connection is saved.
    ("base_url", "http://exa mple.com/v1"),
    ("base_url", "http://-bad-.com"),
    ("base_url", "http://a..b"),
    ("base_url", "http://bad_label.example.com/v1"),
    ("base_url", f"http://{'a' * 64}.example.com/v1"),
    ("api_key", {"k": 1}),
    ("api_key", "a b"),
    ("api_key", "x" * 5_000),
    ("model_id", "whisper-1"),
    ("model_id", 7),
    ("window_source", "hearsay"),
    ("source_url", "file:///etc/passwd"),
    ("verified_on", "30/11/2026"),
    ("verified_on", True),
    ("space", "one"),
    ("space", 2**70),
    ("unexpected", 1),
]


@pytest.mark.parametrize(("field", "value"), BAD_INPUT)
def test_bad_input_on_create_is_a_400_naming_the_field(api, openai_body, field, value):
    response = api.post(LIST, {**openai_body, field: value}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert SECRET_KEY not in body(response)


@pytest.mark.parametrize(("field", "value"), [row for row in BAD_INPUT if row[0] != "space"])
def test_bad_input_on_update_is_a_400_naming_the_field(api, stored, field, value):
    response = api.patch(detail(stored.pk), {field: value}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert SECRET_KEY not in body(response)


def test_a_host_with_non_ascii_letters_is_shown_in_punycode_beside_it(api, space):
    response = api.post(
        LIST,
        {
            "space": space.pk,
            "name": "lookalike",
            "provider": "openai_compatible",
            "base_url": "http://ex\u0430mple.com/v1",  # a Cyrillic "a"
            "model_id": "m",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["base_url"] == "http://ex\u0430mple.com/v1"
    assert data["base_url_punycode"] == "http://xn--exmple-4nf.com/v1"
    listed = api.get(LIST).json()["results"]
    assert [item["base_url_punycode"] for item in listed] == ["http://xn--exmple-4nf.com/v1"]


def test_an_ascii_host_has_no_punycode_form(api, stored):
    assert api.get(detail(stored.pk)).json()["base_url_punycode"] is None


def test_missing_base_url_for_a_compatible_server(api, space):
    response = api.post(
        LIST,
        {"space": space.pk, "name": "p", "provider": "openai_compatible", "model_id": "m"},
        format="json",
    )
    assert response.status_code == 400 and list(response.json()) == ["base_url"]


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[]", b'"text"', b"null", b"{", json.dumps({"space": None}).encode()],
)
def test_malformed_bodies_are_400(api, stored, raw):
    for method, url in (("post", LIST), ("patch", detail(stored.pk))):
        response = getattr(api, method)(url, raw, content_type="application/json")
        assert response.status_code == 400, (method, raw, response.content)


def test_nothing_answers_with_the_key(api, stored, member_api, caplog):
    caplog.set_level(logging.DEBUG)
    responses = [
        api.get(LIST),
        api.get(detail(stored.pk)),
        member_api.get(detail(stored.pk)),
        api.patch(detail(stored.pk), {"safety_margin_tokens": 512}, format="json"),
    ]
    for response in responses:
        assert response.status_code == 200
        assert (
            SECRET_KEY not in body(response)
            and "api_key" not in response.json().get("results", [response.json()])[0]
        )
    assert SECRET_KEY not in caplog.text


# --- schema ------------------------------------------------------------------------------------


def test_the_schema_documents_the_endpoints(api):
    schema = api.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert set(paths["/api/v1/model-connections/"]) >= {"get", "post"}
    assert set(paths["/api/v1/model-connections/{id}/"]) >= {"get", "patch", "delete"}
    assert "502" in paths["/api/models/discover"]["post"]["responses"]
    assert "409" in paths["/api/v1/model-connections/{id}/"]["delete"]["responses"]
    shape = schema["components"]["schemas"]["ModelConnection"]["properties"]
    assert "api_key" not in shape and set(shape) == FIELDS
    create = schema["components"]["schemas"]["ModelConnectionCreateRequest"]["properties"]
    assert create["api_key"]["writeOnly"] is True
