"""`POST /api/v1/sessions/import`: an export comes back as a new session of the caller's, or is
refused whole with the field, the line and the reason."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions_app.models import Session
from tests.api.factories import client_for
from tests.factories import ask, make_agent, make_space, make_user, make_version

pytestmark = pytest.mark.django_db


def _export(api, session) -> bytes:
    response = api.get(f"/api/v1/sessions/{session.pk}/export")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


def _import(api, data: bytes, **fields):
    upload = SimpleUploadedFile("session.jsonl", data, content_type="application/x-ndjson")
    return api.post("/api/v1/sessions/import", {"file": upload, **fields}, format="multipart")


def _records(data: bytes) -> list[dict]:
    items = [json.loads(line) for line in data.splitlines()]
    return [item for item in items if item["type"] == "record"]


def test_an_export_imports_as_a_session_of_the_caller(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-IMPORT"}')
    api = client_for(alice)
    data = _export(api, session)
    response = _import(api, data, space=session.space_id, agent_version=session.agent_version_id)
    assert response.status_code == 201, response.json()
    imported = Session.objects.get(pk=response.json()["id"])
    assert (imported.created_by, imported.read_only, imported.staged) == (alice, False, False)
    assert imported.origin["kind"] == "import" and imported.origin["session"] == session.pk
    assert _records(_export(api, imported)) == _records(data)
    # Without a version it is read only.
    read_only = _import(api, data, space=session.space_id)
    assert read_only.status_code == 201
    assert Session.objects.get(pk=read_only.json()["id"]).read_only


def test_an_altered_or_missing_file_is_refused_whole(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-ALTERED"}')
    api = client_for(alice)
    lines = _export(api, session).splitlines(keepends=True)
    lines[1] = lines[1].replace(b"NONCE", b"nonce")
    before = Session.objects.count()
    response = _import(api, b"".join(lines), space=session.space_id)
    assert response.status_code == 400
    assert "line " in json.dumps(response.json()["file"])
    missing = api.post("/api/v1/sessions/import", {"space": session.space_id}, format="multipart")
    assert missing.status_code == 400 and "file" in missing.json()
    assert Session.objects.count() == before


def test_another_space_or_its_versions_are_not_found(alice, gateway, make_demo_session):
    session = make_demo_session()
    api = client_for(alice)
    data = _export(api, session)
    mallory = make_user("mallory")
    theirs = make_space(name="Theirs", admin=mallory)
    their_version = make_version(make_agent(theirs, mallory))
    before = Session.objects.count()
    assert _import(api, data, space=theirs.pk).status_code == 404
    wrong = _import(api, data, space=session.space_id, agent_version=their_version.pk)
    assert wrong.status_code == 404
    assert Session.objects.count() == before
