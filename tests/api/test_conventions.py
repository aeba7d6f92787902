"""Conventions every endpoint shares (API.md): auth, errors, slashes, bodies, paging."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import (
    ObjectDoesNotExist,
    RequestDataTooBig,
    SuspiciousOperation,
    ValidationError,
)
from django.http import Http404
from rest_framework.test import APIClient

from agentloom import errors
from agentloom.api import exception_handler
from tests.api.factories import client_for, finish

pytestmark = pytest.mark.django_db

# Every API path of the contract, in its contract spelling, with the method used to probe it.
PATHS = [
    ("get", "/api/v1/spaces/"),
    ("post", "/api/v1/spaces/{space}/members"),
    ("get", "/api/v1/agents/"),
    ("get", "/api/v1/agents/{agent}/"),
    ("post", "/api/v1/agents/{agent}/publish"),
    ("get", "/api/v1/agents/{agent}/versions/"),
    ("get", "/api/v1/sessions/"),
    ("get", "/api/v1/sessions/{session}/"),
    ("get", "/api/v1/sessions/{session}/runs"),
    ("get", "/api/v1/sessions/{session}/messages"),
    ("get", "/api/v1/sessions/{session}/views/"),
    ("get", "/api/v1/runs/{run}/"),
    ("post", "/api/v1/runs/{run}/supplements"),
    ("post", "/api/v1/runs/{run}/resume"),
    ("post", "/api/v1/runs/{run}/cancel"),
    ("get", "/api/v1/runs/{run}/context"),
    ("get", "/api/v1/runs/{run}/model-calls"),
]


def _url(template, run):
    session = run.session
    return template.format(
        space=session.space_id, agent=session.agent_id, session=session.pk, run=run.pk
    )


# --- the exception handler ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "body"),
    [
        (errors.InvalidInput("Too long.", field="name"), 400, {"name": ["Too long."]}),
        (errors.InvalidInput("Bad."), 400, {"detail": "Bad."}),
        (errors.PermissionDenied("Admins only."), 403, {"detail": "Admins only."}),
        (errors.NotFound("Not found."), 404, {"detail": "Not found."}),
        (errors.Conflict("Busy."), 409, {"detail": "Busy."}),
        (errors.UpstreamError("Provider failed."), 502, {"detail": "Provider failed."}),
        (Http404(), 404, {"detail": "Not found."}),
        (ObjectDoesNotExist(), 404, {"detail": "Not found."}),
        (RequestDataTooBig(), 413, {"detail": "Request body is too large."}),
        (SuspiciousOperation(), 400, {"detail": "Bad request."}),
        (ValidationError("Immutable."), 400, {"detail": "Immutable."}),
    ],
)
def test_exception_handler_maps_errors_to_json(error, status, body):
    response = exception_handler(error, {})
    assert response.status_code == status
    assert response.data == body


def test_exception_handler_leaves_unknown_errors_to_django():
    assert exception_handler(RuntimeError("boom"), {}) is None


# --- authentication ----------------------------------------------------------------------------


def test_anonymous_gets_401_with_a_token_challenge(anon, run):
    response = anon.get("/api/v1/spaces/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_a_wrong_token_is_401(run):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/v1/spaces/").status_code == 401


def test_session_login_works_with_csrf(alice, space):
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username="alice", password="pw-alice")
    assert client.get("/api/v1/spaces/").status_code == 200
    # Without the CSRF token a cookie-authenticated write is refused …
    refused = client.post("/api/v1/spaces/", {"name": "New"}, format="json")
    assert refused.status_code == 403
    # … and accepted with it.
    client.get("/admin/login/")
    token = client.cookies["csrftoken"].value
    accepted = client.post(
        "/api/v1/spaces/", {"name": "New"}, format="json", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 201


# --- paths -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "template"), PATHS)
def test_paths_match_with_and_without_trailing_slash(method, template, api, run):
    url = _url(template, run)
    other = url[:-1] if url.endswith("/") else url + "/"
    first = getattr(api, method)(url, {}, format="json")
    second = getattr(api, method)(other, {}, format="json")
    assert first.status_code != 404
    assert second.status_code != 404
    if method == "get":
        assert second.json() == first.json()


@pytest.mark.parametrize("path", ["/api/v1/nothing", "/api/v1/runs/1/explode", "/api/v1/"])
def test_unknown_api_paths_are_a_json_404(api, path):
    response = api.post(path)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize("raw_id", ["abc", "-1", "0", "1.5", "99999999999999999999999", "%20"])
@pytest.mark.parametrize(("method", "template"), [p for p in PATHS if "{" in p[1]])
def test_malformed_missing_or_huge_ids_are_404(method, template, raw_id, api, run):
    response = getattr(api, method)(re.sub(r"\{\w+\}", raw_id, template), {}, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


# --- bodies ------------------------------------------------------------------------------------

BODY_ENDPOINTS = [
    "/api/v1/spaces/",
    "/api/v1/spaces/{space}/members",
    "/api/v1/agents/",
    "/api/v1/sessions/",
    "/api/v1/sessions/{session}/runs",
    "/api/v1/runs/{run}/supplements",
]


@pytest.mark.parametrize("template", BODY_ENDPOINTS)
def test_malformed_json_is_400(template, api, run):
    response = api.post(_url(template, run), b'{"name": ', content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


@pytest.mark.parametrize("template", BODY_ENDPOINTS)
@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"]
)
def test_other_content_types_are_415(template, content_type, api, run):
    data = b"name=x"
    if "multipart" in content_type:
        content_type += "; boundary=xyz"
        data = b'--xyz\r\nContent-Disposition: form-data; name="name"\r\n\r\nx\r\n--xyz--\r\n'
    response = api.post(_url(template, run), data, content_type=content_type)
    assert response.status_code == 415
    assert "Unsupported media type" in response.json()["detail"]


@pytest.mark.parametrize("template", [*BODY_ENDPOINTS, "/api/v1/agents/{agent}/"])
def test_a_body_over_the_upload_limit_is_413(template, api, run, settings):
    body = b'{"name": "' + b"x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE + b'"}'
    method = api.patch if template.endswith("{agent}/") else api.post
    response = method(_url(template, run), body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"detail": "Request body is too large."}


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"null", b"42"])
@pytest.mark.parametrize("template", BODY_ENDPOINTS)
def test_a_body_that_is_not_an_object_is_400(template, body, api, run):
    finish(run, "failed")
    response = api.post(_url(template, run), body, content_type="application/json")
    assert response.status_code == 400


# --- pagination --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("limit=abc", "limit"),
        ("limit=", "limit"),
        ("offset=-1", "offset"),
        ("offset=x", "offset"),
    ],
)
@pytest.mark.parametrize(
    "template",
    [
        "/api/v1/spaces/",
        "/api/v1/agents/",
        "/api/v1/agents/{agent}/versions/",
        "/api/v1/sessions/",
        "/api/v1/sessions/{session}/runs",
        "/api/v1/sessions/{session}/views/",
        "/api/v1/runs/{run}/model-calls",
    ],
)
def test_bad_page_parameters_are_400_naming_the_field(template, query, field, api, run):
    response = api.get(f"{_url(template, run)}?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_lists_are_pages_with_limit_and_offset(api, alice):
    from agentloom.spaces.services.spaces import space_create

    for number in range(5):
        space_create(user=alice, name=f"S{number}")
    first = api.get("/api/v1/spaces/?limit=2").json()
    assert first["count"] == 5
    assert [s["name"] for s in first["results"]] == ["S0", "S1"]
    assert first["previous"] is None
    assert "offset=2" in first["next"]
    last = api.get("/api/v1/spaces/?limit=2&offset=4").json()
    assert [s["name"] for s in last["results"]] == ["S4"]
    assert last["next"] is None
    assert api.get("/api/v1/spaces/?limit=200").json()["count"] == 5
    for offset in ("9223372036854775807", "9223372036854775808", "9" * 5000):
        beyond = api.get(f"/api/v1/spaces/?offset={offset}")
        assert beyond.status_code == 200, beyond.content
        assert (beyond.json()["count"], beyond.json()["results"]) == (5, [])


def test_the_default_page_holds_50(api, alice):
    from agentloom.spaces.services.spaces import space_create

    for number in range(51):
        space_create(user=alice, name=f"S{number}")
    page = api.get("/api/v1/spaces/").json()
    assert page["count"] == 51
    assert len(page["results"]) == 50


def test_client_for_none_is_anonymous(run):
    assert client_for(None).get("/api/v1/sessions/").status_code == 401
