"""Forking a session at a journal record: a copied prefix, then runs of its own."""

from __future__ import annotations

import json

import pytest

from agentloom.engine import UNKNOWN_RESULT
from agentloom.errors import Conflict, NotFound
from sessions_app.models import Session, SessionMessage
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.fork import session_fork
from sessions_app.services.runs import run_ask
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db


def _seq_of(session, text):
    for record in SessionMessage.objects.filter(session=session, instance="main"):
        if text in json.dumps(record.message):
            return record.seq
    raise AssertionError(text)


def test_the_forks_first_run_sees_exactly_the_prefix(alice, bob, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, "NONCE-FIRST")
    ask(session, alice, "NONCE-SECOND")
    ask(session, alice, "NONCE-THIRD")
    at = _seq_of(session, "NONCE-SECOND")
    with pytest.raises(NotFound):
        session_fork(user=bob, session=session, seq=at)
    fork = session_fork(user=alice, session=session, seq=at)
    copied = list(SessionMessage.objects.filter(session=fork).order_by("seq"))
    assert [r.seq for r in copied] == list(range(1, len(copied) + 1))
    assert max(r.origin_seq for r in copied) <= at
    gateway.requests.clear()
    ask(fork, alice, "NONCE-FORKED")
    sent = json.dumps(gateway.action_requests()[0].messages)
    assert "NONCE-FIRST" in sent and "NONCE-SECOND" in sent
    assert "NONCE-THIRD" not in sent


def test_a_fork_inside_a_tool_group_closes_it_unknown(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-ECHO"}')
    call = SessionMessage.objects.filter(session=session, kind="assistant").order_by("seq")[0]
    fork = session_fork(user=alice, session=session, seq=call.seq)
    last = SessionMessage.objects.filter(session=fork).order_by("-seq")[0]
    assert last.kind == "tool_result" and last.message["content"] == UNKNOWN_RESULT


def test_a_fork_during_an_active_run_is_refused(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, "NONCE-FIRST")
    run_ask(user=alice, session=session, question="pending")
    with pytest.raises(Conflict):
        session_fork(user=alice, session=session, seq=1)


def test_the_original_is_purged_while_its_fork_lives_on(alice, gateway, make_demo_session):
    root = make_user("root", superuser=True)
    session = make_demo_session()
    ask(session, alice, "NONCE-FIRST")
    fork = session_fork(user=alice, session=session, seq=_seq_of(session, "NONCE-FIRST"))
    session_delete(user=alice, session=session)
    session_purge(user=root, session_id=session.pk)
    assert not Session.objects.filter(pk=session.pk).exists()
    assert SessionMessage.objects.filter(session=fork).exists()
    ask(fork, alice, "NONCE-AFTER")


def test_the_api_and_the_journal_page_fork(alice, bob, gateway, make_demo_session, client):
    session = make_demo_session()
    ask(session, alice, "NONCE-FIRST")
    client.force_login(alice)
    page = client.get(f"/sessions/{session.pk}/journal/").content.decode()
    assert "Fork from here" in page
    answer = client.post(f"/sessions/{session.pk}/fork/", {"seq": 1})
    fork = Session.objects.exclude(pk=session.pk).get()
    assert answer.status_code == 302 and answer["Location"] == f"/sessions/{fork.pk}/"
    url = f"/api/v1/sessions/{session.pk}/fork"
    made = client.post(url, {"seq": 1}, content_type="application/json")
    assert made.status_code == 201
    assert client.post(url, {"seq": 999}, content_type="application/json").json() == {
        "seq": ["No journal record of this session has this seq."]
    }
    client.force_login(bob)
    assert client.post(url, {"seq": 1}, content_type="application/json").status_code == 404
