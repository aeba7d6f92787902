"""Forking a session at a journal record: a copied prefix, then runs of its own."""

from __future__ import annotations

import json
import re

import pytest

from agentloom.engine import HANDOFF_MARK, UNKNOWN_RESULT
from agentloom.errors import Conflict, NotFound
from context_app.engine_adapter import version_binding
from sessions_app.models import JournalReference, Session, SessionMessage, SessionView
from sessions_app.selectors.checkpoints import JournalStore
from sessions_app.selectors.history import history_for_new_run
from sessions_app.selectors.stored_messages import messages_read
from sessions_app.selectors.views import compliant_view
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.fork import session_fork
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import run_ask
from tests.factories import ask, make_user
from tests.sessions_app.conftest import long_question

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
    rows = client.get(f"/sessions/{session.pk}/journal/rows/?after=0").content.decode()
    for html in (page, rows):
        # Every row's form posts to the fork, the page's and "Load more"'s rows alike.
        forms = html.count('class="inline fork-form"')
        assert forms >= 2 and html.count(f'action="/sessions/{session.pk}/fork/"') == forms
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


def _compacted(alice, make_demo_session):
    """A session whose sub-agent's records come first (so a fork's seqs differ from the
    original's), then runs that compact: a reusable view with a summary citing `s:` refs."""
    session = make_demo_session(
        context_window=9_000,
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}
        ],
    )
    ask(session, alice, '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"kid\\"}"}')
    assert SessionMessage.objects.filter(session=session).exclude(instance="main").exists()
    for n in range(4):
        ask(session, alice, long_question(n))
    view = compliant_view(session, version_binding(session.agent_version))
    assert view is not None
    return session, view


def _cited(view) -> list[str]:
    return re.findall(r"\bs:\d+", json.dumps(messages_read(view.session_id, view.messages)))


def test_a_fork_after_a_views_watermark_starts_from_the_view(alice, gateway, make_demo_session):
    root = make_user("root", superuser=True)
    session, view = _compacted(alice, make_demo_session)
    last = SessionMessage.objects.filter(session=session, instance="main").order_by("-seq")[0]
    fork = session_fork(user=alice, session=session, seq=last.seq)
    binding = version_binding(fork.agent_version)
    carried = compliant_view(fork, binding)
    assert SessionView.objects.filter(session=fork).count() == session.views.count()
    copies = dict(SessionMessage.objects.filter(session=fork).values_list("seq", "origin_seq"))
    # Every reference names the fork's copy of the record the original's named.
    assert copies[carried.watermark] == view.watermark != carried.watermark
    shown = [
        (a["s"], b["s"]) for a, b in zip(view.entries, carried.entries, strict=True) if "s" in a
    ]
    assert shown and all(copies[mine] == theirs for theirs, mine in shown)
    # A summary's ranges name the copies of the records they named (joined where the fork
    # left the sub-agent's records out).
    stood = [
        (a["src"], b["src"])
        for a, b in zip(view.entries, carried.entries, strict=True)
        if "src" in a
    ]
    assert stood
    assert all(
        [copies[seq] for first, last in mine for seq in range(first, last + 1)]
        == [seq for first, last in theirs for seq in range(first, last + 1)]
        for theirs, mine in stood
    )
    assert _cited(view) and len(_cited(view)) == len(_cited(carried))
    store = JournalStore(fork.runs.order_by("number")[0])
    original = dict(SessionMessage.objects.filter(session=session).values_list("seq", "message"))
    for theirs, mine in zip(_cited(view), _cited(carried), strict=True):
        assert copies[int(mine[2:])] == int(theirs[2:])
        read = store.main_record(up_to=fork.next_seq, seq=int(mine[2:]))
        assert read == original[int(theirs[2:])]
    # A run reference names the same run and local seq in the fork.
    assert (
        store.main_record(up_to=fork.next_seq, run=1, local=1)
        == original[
            SessionMessage.objects.get(
                session=session, run__number=1, instance="main", local_seq=1
            ).seq
        ]
    )
    assert JournalReference.objects.filter(view=carried).exists()
    # Its first run starts from the carried view: no compaction, the summary shown.
    assert history_for_new_run(fork, binding).view_revision == carried.revision
    gateway.requests.clear()
    assert ask(fork, alice, "NONCE-FORKED").status == "succeeded"
    assert {request.purpose for request in gateway.requests} == {"action"}
    assert HANDOFF_MARK in json.dumps(gateway.action_requests()[0].messages)
    # The original purged, the fork and its view live on.
    session_delete(user=alice, session=session)
    session_purge(user=root, session_id=session.pk)
    assert SessionView.objects.filter(pk=carried.pk).exists()
    assert ask(fork, alice, "NONCE-AFTER-PURGE").status == "succeeded"


def test_a_fork_before_a_views_watermark_carries_no_view(alice, gateway, make_demo_session):
    session, _ = _compacted(alice, make_demo_session)
    view = session.views.order_by("watermark")[0]
    before = SessionMessage.objects.filter(session=session, instance="main", seq__lt=view.watermark)
    fork = session_fork(user=alice, session=session, seq=before.order_by("-seq")[0].seq)
    assert not SessionView.objects.filter(session=fork).exists()


def test_a_view_that_does_not_map_whole_or_is_revoked_is_not_carried(
    alice, gateway, make_demo_session
):
    session, view = _compacted(alice, make_demo_session)
    views = list(session.views.order_by("revision"))
    assert len(views) >= 2
    # A reference to a record the fork does not copy (the sub-agent's): the view stays behind.
    child = SessionMessage.objects.filter(session=session).exclude(instance="main")[0]
    first = views[0]
    SessionView.objects.filter(pk=first.pk).update(
        entries=[*first.entries, {"s": child.seq, "as": "user"}]
    )
    # A summary whose range runs over it: its ends map, the records between do not all.
    second = views[1]
    main = SessionMessage.objects.filter(session=session, instance="main")
    around = (
        main.filter(seq__lt=child.seq).order_by("-seq")[0].seq,
        main.filter(seq__gt=child.seq).order_by("seq")[0].seq,
    )
    SessionView.objects.filter(pk=second.pk).update(
        entries=[{**e, "src": [list(around)]} if "src" in e else e for e in second.entries]
    )
    view_revoke(user=alice, session=session, revision=view.revision)
    last = SessionMessage.objects.filter(session=session, instance="main").order_by("-seq")[0]
    fork = session_fork(user=alice, session=session, seq=last.seq)
    carried = SessionMessage.objects.filter(session=fork)
    watermarks = {
        dict(carried.values_list("seq", "origin_seq"))[w]
        for w in SessionView.objects.filter(session=fork).values_list("watermark", flat=True)
    }
    assert watermarks == {v.watermark for v in views[1:] if v.pk != view.pk}


def test_a_summary_range_over_a_record_the_fork_does_not_copy_is_not_carried(
    alice, gateway, make_demo_session
):
    session, _ = _compacted(alice, make_demo_session)
    first, *others = session.views.order_by("revision")
    # The range's ends are copied, the sub-agent's record between them is not.
    child = SessionMessage.objects.filter(session=session).exclude(instance="main")[0]
    main = SessionMessage.objects.filter(session=session, instance="main")
    ends = [
        main.filter(seq__lt=child.seq).order_by("-seq")[0].seq,
        main.filter(seq__gt=child.seq).order_by("seq")[0].seq,
    ]
    SessionView.objects.filter(pk=first.pk).update(
        entries=[{**e, "src": [ends]} if "src" in e else e for e in first.entries]
    )
    last = main.order_by("-seq")[0]
    fork = session_fork(user=alice, session=session, seq=last.seq)
    copies = dict(SessionMessage.objects.filter(session=fork).values_list("seq", "origin_seq"))
    watermarks = {
        copies[w]
        for w in SessionView.objects.filter(session=fork).values_list("watermark", flat=True)
    }
    assert others and watermarks == {view.watermark for view in others}
