"""Exporting a session: the creator's signed file, the OpenAI messages, the operator's command."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from agentloom.errors import NotFound, PermissionDenied
from sessions_app.models import Run, Session, SessionExport, SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.export import export_lines, session_export, session_export_by_operator
from sessions_app.services.legacy import adopt_legacy_runs
from sessions_app.services.runs import run_ask, run_resume, supplement_add
from sessions_app.services.transfer import Signer
from tests.factories import ask, make_run, make_user
from tests.sessions_app.conftest import SECRET, long_question
from tests.sessions_app.test_legacy import LEGACY_FRAME
from tests.support.journaled import journaled_session

pytestmark = pytest.mark.django_db


def rich_session(alice, make_demo_session):
    """A session with tools, a supplement, a sub-agent, compactions, a failure, a resume and a
    run from before the journal."""
    session = make_demo_session(
        context_window=9_000,
        policy={"model_steps": 2},
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}
        ],
    )
    legacy = make_run(session, status="failed", question="NONCE-LEGACY question")
    Run.objects.filter(pk=legacy.pk).update(checkpoint=LEGACY_FRAME, error="crashed")
    adopt_legacy_runs(session=session)
    ask(session, alice, '/tool echo {"text": "NONCE-1"} /tool calculator {"expression": "2*21"}')
    with_supplement = run_ask(user=alice, session=session, question='/tool echo {"text": "two"}')
    supplement_add(user=alice, run=with_supplement, text="NONCE-SUPPLEMENT")
    run_execute(run_id=with_supplement.pk)
    ask(session, alice, '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"kid\\"}"}')
    for n in range(3):
        ask(session, alice, long_question(n))
    ask(session, alice, f"NONCE-KEY {SECRET}")
    resumed = ask(session, alice, "NONCE-RESUME [boom]")
    run_resume(user=alice, run=resumed)
    run_execute(run_id=resumed.pk)
    return session


def test_the_creator_exports_every_record_in_order_signed(alice, gateway, make_demo_session):
    session = rich_session(alice, make_demo_session)
    raw = b"".join(session_export(user=alice, session=session)).splitlines(keepends=True)
    items = [json.loads(line) for line in raw]
    header, signature = items[0], items[-1]
    assert header["type"] == "header" and header["format_version"] == 1
    assert header["session"]["agent_version"]["snapshot"]["system_prompt"]
    assert header["exported_by"] == "alice"
    records = [item for item in items if item["type"] == "record"]
    stored = list(SessionMessage.objects.filter(session=session).order_by("seq"))
    assert header["records"] == len(records) == len(stored)
    assert [r["seq"] for r in records] == [m.seq for m in stored]
    assert [r["message"] for r in records] == [m.message for m in stored]
    assert {r["instance"] for r in records} > {"main"}  # the sub-agent's records too
    assert any(r["entry_key"].startswith("legacy") for r in records)
    types = [item["type"] for item in items]
    assert {"run", "compaction", "reference", "view", "model_call"} <= set(types)
    assert types.index("run") > max(i for i, t in enumerate(types) if t == "record")
    compactions = [item for item in items if item["type"] == "compaction"]
    assert any(item["summarised_ranges"] for item in compactions)
    assert all("response" not in item for item in items if item["type"] == "model_call")
    assert signature == {"type": "signature", "lines": len(items) - 1, "hmac": signature["hmac"]}
    signer = Signer()
    for line in raw[:-1]:
        signer.update(line)
    assert signer.verifies(signature["hmac"])
    assert SessionExport.objects.get(session_number=session.pk).exported_by == alice


def test_no_secret_in_any_export(alice, gateway, make_demo_session, monkeypatch):
    session = rich_session(alice, make_demo_session)
    secrets = [SECRET, settings.FIELD_ENCRYPTION_KEY, settings.SECRET_KEY]
    for output in ("jsonl", "openai"):
        for bodies in (False, True):
            text = b"".join(
                session_export(user=alice, session=session, format=output, bodies=bodies)
            ).decode()
            assert "NONCE-KEY" in text
            for secret in secrets:
                assert secret not in text, (output, bodies)
            assert "api_key" not in text


def test_only_the_creator_exports(alice, bob, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, "hello")
    with pytest.raises(NotFound):
        session_export(user=bob, session=session)
    with pytest.raises(PermissionDenied):
        session_export_by_operator(user=bob, session_id=session.pk)
    assert not SessionExport.objects.exists()


def test_the_openai_format_is_the_main_conversation(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-ECHO"}')
    ask(session, alice, "NONCE-SECOND")
    messages = json.loads(b"".join(session_export(user=alice, session=session, format="openai")))
    assert messages[0] == {"role": "system", "content": "You are the demo agent."}
    assert [m["role"] for m in messages].count("user") == 2
    assert any(m.get("tool_calls") for m in messages)
    assert any(m["role"] == "tool" and "NONCE-ECHO" in m["content"] for m in messages)

    # Pinned instructions follow the system prompt, as every run asked now starts with them.
    Session.objects.filter(pk=session.pk).update(pinned="Answer in French. NONCE-PIN")
    session.refresh_from_db()
    messages = json.loads(b"".join(session_export(user=alice, session=session, format="openai")))
    assert messages[0]["content"].startswith("You are the demo agent.\n\n")
    assert messages[0]["content"].endswith("Answer in French. NONCE-PIN")


def test_the_operator_command_exports_and_is_audited(alice, gateway, make_demo_session, tmp_path):
    root = make_user("root", superuser=True)
    session = make_demo_session()
    ask(session, alice, "NONCE-OPERATOR")
    target = tmp_path / "out.jsonl"
    call_command("export_session", session.pk, by="root", file=str(target), stderr=io.StringIO())
    assert "NONCE-OPERATOR" in target.read_text()
    audit = SessionExport.objects.get()
    assert (audit.exported_by, audit.by_operator) == (root, True)
    with pytest.raises(CommandError):
        call_command("export_session", session.pk, by="alice", file=str(target))


def test_the_api_streams_the_export(alice, bob, gateway, make_demo_session, client):
    session = make_demo_session()
    ask(session, alice, "NONCE-API")
    client.force_login(alice)
    url = f"/api/v1/sessions/{session.pk}/export"
    answer = client.get(url)
    assert answer.status_code == 200 and answer.streaming
    assert answer["Content-Type"] == "application/x-ndjson"
    assert b"NONCE-API" in b"".join(answer.streaming_content)
    assert client.get(url, {"output": "yaml"}).json() == {
        "output": ['"yaml" is not a valid choice.']
    }
    assert client.get(url, {"output": "openai"}).status_code == 200
    client.force_login(bob)
    assert client.get(url).status_code == 404


def test_an_export_reads_in_bounded_memory(alice):
    """Peak memory while exporting stays near one batch, whatever the session's length."""

    def peak(session) -> tuple[int, int]:
        tracemalloc.start()
        written = sum(len(line) for line in export_lines(session, format="jsonl", exported_by="a"))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top, written

    small = journaled_session(alice, 100)  # 500 records
    large = journaled_session(alice, 800)  # 4,000 records
    small_peak, _ = peak(small)
    large_peak, large_bytes = peak(large)
    assert large_peak < 2 * small_peak + 1_000_000, (small_peak, large_peak)
    assert large_peak < large_bytes / 2


def test_the_journal_page_offers_the_export(alice, bob, gateway, make_demo_session, client):
    session = make_demo_session()
    ask(session, alice, "NONCE-CONSOLE")
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/journal/").content.decode()
    assert f'href="/sessions/{session.pk}/export/"' in page
    download = client.get(f"/sessions/{session.pk}/export/", {"output": "openai"})
    assert download["Content-Disposition"].endswith('.openai.json"')
    assert b"NONCE-CONSOLE" in b"".join(download.streaming_content)
    client.force_login(bob)
    assert client.get(f"/sessions/{session.pk}/export/").status_code == 404
