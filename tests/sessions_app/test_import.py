"""Importing a signed export: checked whole, staged hidden, a round trip keeps every record."""

from __future__ import annotations

import io
import json

import pytest

from agentloom.engine import IMPORTED_PREFIX
from sessions_app.models import Session
from sessions_app.services.export import session_export
from sessions_app.services.fork import session_fork
from sessions_app.services.imports import ImportRefused, session_import
from tests.factories import ask, make_run

pytestmark = pytest.mark.django_db


def _exported(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-ECHO"}')
    ask(session, alice, "NONCE-SECOND")
    return session, b"".join(session_export(user=alice, session=session))


def _imported(alice, session, data: bytes) -> Session:
    """Import `data` into `session`'s space, bound to its agent version."""
    return session_import(
        user=alice,
        space=session.space,
        stream=io.BytesIO(data),
        agent_version=session.agent_version,
    )


def _records(data: bytes) -> list[dict]:
    items = [json.loads(line) for line in data.splitlines()]
    return [item for item in items if item["type"] == "record"]


def test_export_import_export_gives_the_same_records(alice, gateway, make_demo_session):
    session, data = _exported(alice, gateway, make_demo_session)
    imported = _imported(alice, session, data)
    assert imported.origin["kind"] == "import" and imported.origin["session"] == session.pk
    assert not imported.staged and not imported.read_only
    again = b"".join(session_export(user=alice, session=imported))
    assert _records(again) == _records(data)
    assert all(run.origin_number for run in imported.runs.all())
    ask(imported, alice, "NONCE-AFTER-IMPORT")


def _refused(alice, space, data: bytes) -> ImportRefused:
    before = Session.objects.count()
    with pytest.raises(ImportRefused) as refused:
        session_import(user=alice, space=space, stream=io.BytesIO(data))
    assert Session.objects.count() == before  # refused whole: nothing written
    return refused.value


def test_altered_files_are_refused_whole_with_the_line(alice, gateway, make_demo_session):
    session, data = _exported(alice, gateway, make_demo_session)
    lines = data.splitlines(keepends=True)
    changed = list(lines)
    changed[2] = changed[2].replace(b'"seq":2', b'"seq":7')
    assert "line " in _refused(alice, session.space, b"".join(changed)).detail
    missing = lines[:2] + lines[3:]
    assert _refused(alice, session.space, b"".join(missing)).detail.startswith("line ")
    at = next(i for i, line in enumerate(lines) if b'"content":"NONCE-SECOND"' in line)
    forged = list(lines)
    forged[at] = lines[at].replace(b"NONCE-SECOND", b"NONCE-FORGED")
    assert "signature" in _refused(alice, session.space, b"".join(forged)).detail
    version = lines[0].replace(b'"format_version":1', b'"format_version":9')
    assert _refused(alice, session.space, version + b"".join(lines[1:])).line == 1
    unsigned = b"".join(lines[:-1])
    assert "not signed" in _refused(alice, session.space, unsigned).detail


class Nothing(io.RawIOBase):
    """A 2 GB file of zero bytes, produced as read (never held)."""

    size = 2 * 1024**3

    def __init__(self):
        self.at = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        count = min(len(buffer), self.size - self.at)
        buffer[:count] = b"\0" * count
        self.at += count
        return count


def test_a_file_of_nothing_is_refused_at_the_size_cap(alice, space, settings):
    settings.SESSION_IMPORT_MAX_BYTES = 1024 * 1024
    refused = _refused(alice, space, b"")
    assert "empty" in refused.detail
    with pytest.raises(ImportRefused, match="larger than"):
        session_import(user=alice, space=space, stream=io.BufferedReader(Nothing()))


def test_the_command_imports_a_file(alice, gateway, make_demo_session, tmp_path):
    from django.core.management import CommandError, call_command

    session, data = _exported(alice, gateway, make_demo_session)
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    out = io.StringIO()
    call_command("import_session", str(path), by="alice", space=session.space.pk, stdout=out)
    imported = Session.objects.get(pk=int(out.getvalue().split()[-1]))
    assert imported.read_only
    from agentloom.errors import Conflict
    from sessions_app.services.runs import run_ask

    with pytest.raises(Conflict):
        run_ask(user=alice, session=imported, question="a read-only session takes no run")
    path.write_bytes(data.replace(b"NONCE-SECOND", b"NONCE-FORGED"))
    with pytest.raises(CommandError, match="signature"):
        call_command("import_session", str(path), by="alice", space=session.space.pk)


def test_an_import_that_stopped_half_way_is_discarded_once_stale(
    alice, gateway, make_demo_session, monkeypatch
):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.models import SessionMessage
    from sessions_app.services import imports

    session, data = _exported(alice, gateway, make_demo_session)
    monkeypatch.setattr(imports, "IMPORT_BATCH", 2)
    written = imports._write

    def stop_after_the_first_batch(batch):
        written(batch)
        raise KeyboardInterrupt  # the process stops here

    monkeypatch.setattr(imports, "_write", stop_after_the_first_batch)
    with pytest.raises(KeyboardInterrupt):
        session_import(user=alice, space=session.space, stream=io.BytesIO(data))
    (staged,) = Session.objects.filter(staged=True)
    assert SessionMessage.objects.filter(session=staged).count() == 2
    # A stopped import is kept while it could still be writing, then discarded whole.
    assert imports.staged_discard() == []
    later = timezone.now() + imports.STAGED_MAX_AGE + timedelta(minutes=1)
    assert imports.staged_discard(now=later) == [staged.pk]
    assert not Session.objects.filter(pk=staged.pk).exists()
    assert not SessionMessage.objects.filter(session_id=staged.pk).exists()
    assert Session.objects.filter(pk=session.pk).exists()  # a published session stays


def _marks(request) -> int:
    return sum(str(m.get("content")).startswith(IMPORTED_PREFIX) for m in request.messages)


def test_runs_of_an_imported_session_are_told_its_history_was_imported(
    alice, gateway, make_demo_session
):
    session, data = _exported(alice, gateway, make_demo_session)
    gateway.requests.clear()
    ask(session, alice, "NONCE-OWN")
    assert _marks(gateway.action_requests()[0]) == 0  # a session opened here: no note
    imported = _imported(alice, session, data)
    assert imported.origin["upto"] == imported.next_seq - 1
    gateway.requests.clear()
    ask(imported, alice, "NONCE-FIRST-HERE")
    first = gateway.action_requests()
    assert _marks(first[0]) == 1
    note = next(m for m in first[0].messages if str(m["content"]).startswith(IMPORTED_PREFIX))
    assert f"session {session.pk}" in note["content"] and note["role"] == "system"
    gateway.requests.clear()
    ask(imported, alice, "NONCE-SECOND-HERE")
    second = gateway.action_requests()[0]
    # Placed once, where it was: the next run's first request extends the last one before it.
    assert _marks(second) == 1
    last = first[-1].messages
    assert json.dumps(second.messages[: len(last)]) == json.dumps(last)
    # A fork of the imported session still says where its imported records came from.
    fork = session_fork(user=alice, session=imported, seq=imported.next_seq - 1)
    assert 0 < fork.origin["imported"]["upto"] < fork.next_seq
    gateway.requests.clear()
    ask(fork, alice, "NONCE-IN-FORK")
    assert _marks(gateway.action_requests()[0]) == 1


def test_a_run_with_no_record_in_the_file_is_adopted_by_the_first_question(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, "NONCE-JOURNALED")
    # Exported before its session's runs from before the journal were adopted.
    make_run(session, status="succeeded", question="NONCE-NEVER-JOURNALED")
    data = b"".join(session_export(user=alice, session=session))
    imported = _imported(alice, session, data)
    assert not imported.runs_journaled
    gateway.requests.clear()
    ask(imported, alice, "NONCE-HERE")
    assert "NONCE-NEVER-JOURNALED" in json.dumps(gateway.action_requests()[0].messages)
    assert Session.objects.get(pk=imported.pk).runs_journaled
