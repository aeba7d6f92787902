"""Revoking a reusable view: never chosen again, recorded, never deleted."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agentloom.errors import Conflict, NotFound
from agentloom.spaces.models import Membership
from context_app.engine_adapter import version_binding
from sessions_app.models import SessionView
from sessions_app.selectors.history import history_for_new_run
from sessions_app.selectors.views import compliant_view, view_derivations
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import run_resume
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _compacting_session(alice, make_demo_session, runs=4, views=1):
    session = make_demo_session(context_window=9_000)
    for n in range(runs):
        ask(session, alice, long_question(n))
    assert SessionView.objects.filter(session=session).count() >= views
    return session


def test_a_revoked_view_is_never_chosen_and_stays_on_record(alice, gateway, make_demo_session):
    session = _compacting_session(alice, make_demo_session, runs=8, views=2)
    binding = version_binding(session.agent_version)
    best = compliant_view(session, binding)
    revoked = view_revoke(user=alice, session=session, revision=best.revision)
    assert (revoked.revoked_by, revoked.revoked_at is not None) == (alice, True)
    fallback = compliant_view(session, binding)
    assert fallback is None or fallback.revision != best.revision
    history = history_for_new_run(session, binding)
    assert history.view_revision != best.revision
    assert SessionView.objects.filter(pk=best.pk).exists()
    with pytest.raises(Conflict):
        view_revoke(user=alice, session=session, revision=best.revision)
    # Every view revoked: a new run falls back to projecting the whole journal, and works.
    for view in SessionView.objects.filter(session=session, revoked_at__isnull=True):
        view_revoke(user=alice, session=session, revision=view.revision)
    assert history_for_new_run(session, binding).view_revision is None
    run = ask(session, alice, "after revocation")
    assert run.status == "succeeded"
    assert replay_run(run).ok


def test_the_walk_still_holds_with_a_revoked_view_in_between(alice, gateway, make_demo_session):
    session = make_demo_session(policy={"user_turns": 2})
    a = ask(session, alice, "NONCE-A first question [boom]")
    assert a.status == "failed"
    ask(session, alice, "NONCE-B second question")
    ask(session, alice, "NONCE-C third question")
    for view in SessionView.objects.filter(session=session):
        view_revoke(user=alice, session=session, revision=view.revision)
    a.refresh_from_db()
    run_resume(user=alice, run=a)
    type(a).objects.filter(pk=a.pk).update(question="NONCE-A first question")
    run_execute(run_id=a.pk)
    gateway.requests.clear()
    d = ask(session, alice, "NONCE-D fourth question")
    assert d.status == "succeeded"
    seen = " ".join(str(m.get("content")) for m in gateway.action_requests()[0].messages)
    for marker in ("NONCE-B", "NONCE-C"):
        assert marker in seen  # nothing is lost with the views revoked
    assert replay_run(d).ok


def test_who_may_revoke(alice, bob, gateway, make_demo_session):
    session = _compacting_session(alice, make_demo_session, runs=4)
    view = SessionView.objects.filter(session=session).first()
    with pytest.raises(NotFound):
        view_revoke(user=bob, session=session, revision=view.revision)
    Membership.objects.create(space_id=session.space_id, user=bob, role="admin")
    assert view_revoke(user=bob, session=session, revision=view.revision).revoked_by == bob


def test_the_api_revokes_and_lists_the_revocation(alice, bob, gateway, make_demo_session):
    session = _compacting_session(alice, make_demo_session, runs=4)
    view = SessionView.objects.filter(session=session).first()
    client = APIClient()
    client.force_authenticate(alice)
    url = f"/api/v1/sessions/{session.pk}/views/{view.revision}/revoke"
    answer = client.post(url, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["revoked"], answer.json()["revoked_by"]) == (True, "alice")
    assert client.post(url, format="json").status_code == 409
    assert client.post(f"/api/v1/sessions/{session.pk}/views/999/revoke").status_code == 404
    assert client.post(f"/api/v1/sessions/{session.pk}/views/x/revoke").status_code == 404
    listed = client.get(f"/api/v1/sessions/{session.pk}/views/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert any(row["revoked"] and row["revision"] == view.revision for row in rows)
    outsider = APIClient()
    outsider.force_authenticate(bob)
    assert outsider.post(url, format="json").status_code == 404


def test_the_context_page_revokes_with_a_button(alice, gateway, make_demo_session, client):
    session = _compacting_session(alice, make_demo_session, runs=4)
    view = SessionView.objects.filter(session=session).first()
    run = session.runs.order_by("-number").first()
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/context/").content.decode()
    assert f"/sessions/{session.pk}/views/{view.revision}/revoke/" in page
    answer = client.post(
        f"/sessions/{session.pk}/views/{view.revision}/revoke/",
        {"next": f"/runs/{run.pk}/context/"},
    )
    assert answer.status_code == 302 and answer.url == f"/runs/{run.pk}/context/"
    view.refresh_from_db()
    assert view.revoked_by == alice
    page = client.get(f"/runs/{run.pk}/context/").content.decode()
    assert "revoked by alice" in page


def _inherited_view(run) -> int | None:
    run.refresh_from_db()
    return run.checkpoint["context"]["inherited"]["history"]["view"]


@pytest.fixture
def version_two_summaries(monkeypatch):
    """The chain of views these tests walk (which runs compact, and so which views exist) is
    the one version 2's summaries make; the derivation rule is the same under every version."""
    monkeypatch.setattr("agentloom.engine._compaction_versions.CURRENT_COMPACTION", 2)


@pytest.mark.usefixtures("version_two_summaries")
def test_views_derived_from_a_revoked_view_are_never_chosen(alice, gateway, make_demo_session):
    session = make_demo_session(policy={"user_turns": 1})
    for n in range(6):
        ask(session, alice, f"NONCE-Q{n} question")
    r1, r2, r3 = SessionView.objects.filter(session=session).order_by("revision")
    # Each run started from the previous view, so each view's summary was made from it.
    assert [_inherited_view(view.run) for view in (r1, r2, r3)] == [None, 1, 2]
    assert (r1.derived_from, r2.derived_from, r3.derived_from) == (None, r1, r2)
    binding = version_binding(session.agent_version)
    assert compliant_view(session, binding) == r3

    view_revoke(user=alice, session=session, revision=r2.revision)
    # r3 carries r2's summary: the newest view with a clean chain is r1.
    assert compliant_view(session, binding) == r1
    run7 = ask(session, alice, "NONCE-Q6 question")
    assert (run7.status, _inherited_view(run7)) == ("succeeded", r1.revision)
    r4 = SessionView.objects.get(run=run7)
    assert r4.derived_from == r1
    assert compliant_view(session, binding) == r4

    # A run that started from r4 saves its view after r1 is revoked: that view is never chosen.
    gateway.during_call.append(lambda: view_revoke(user=alice, session=session, revision=1))
    run8 = ask(session, alice, "NONCE-Q7 question")
    assert _inherited_view(run8) == r4.revision
    r5 = SessionView.objects.get(run=run8)
    assert r5.derived_from == r4
    derivations = view_derivations(session.pk)
    assert {revision: d.revoked_ancestor for revision, d in derivations.items()} == {
        1: None,
        2: 1,
        3: 2,
        4: 1,
        5: 1,
    }
    # Every chain holds a revoked view: the next run projects the whole journal, and works.
    assert compliant_view(session, binding) is None
    run9 = ask(session, alice, "NONCE-Q8 question")
    assert (run9.status, _inherited_view(run9)) == ("succeeded", None)
    seen = " ".join(str(m.get("content")) for m in gateway.action_requests()[-1].messages)
    assert all(f"NONCE-Q{n}" in seen for n in range(9))
    assert replay_run(run9).ok


def test_choosing_a_view_reads_no_derivations_while_no_view_is_revoked(
    alice, gateway, make_demo_session, monkeypatch
):
    session = make_demo_session(policy={"user_turns": 1})
    for n in range(4):
        ask(session, alice, f"NONCE-Q{n} question")
    binding = version_binding(session.agent_version)
    newest = SessionView.objects.filter(session=session).order_by("-revision").first()
    read = []
    derivations = view_derivations

    def counted(session_id):
        read.append(session_id)
        return derivations(session_id)

    monkeypatch.setattr("sessions_app.selectors.views.view_derivations", counted)
    with CaptureQueriesContext(connection) as queries:
        assert compliant_view(session, binding) == newest
    # The best candidate and whether any view is revoked: two rows read, whatever the views.
    assert (len(queries.captured_queries), read) == (2, [])
    # With a view revoked, the chains are read: a view derived from it must not be chosen.
    view_revoke(user=alice, session=session, revision=newest.derived_from.revision)
    assert compliant_view(session, binding) not in (newest, newest.derived_from)
    assert read == [session.pk]


@pytest.mark.usefixtures("version_two_summaries")
def test_the_api_and_the_context_page_show_views_revoked_by_derivation(
    alice, gateway, make_demo_session, client
):
    session = make_demo_session(policy={"user_turns": 1})
    for n in range(6):
        ask(session, alice, f"NONCE-Q{n} question")
    client = APIClient()
    client.force_authenticate(alice)
    answer = client.post(f"/api/v1/sessions/{session.pk}/views/2/revoke", format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["revoked_by_derivation"] is None
    rows = client.get(f"/api/v1/sessions/{session.pk}/views/").json()["results"]
    shown = {
        row["revision"]: (
            row["derived_from"],
            row["revoked"],
            row["revoked_by"],
            row["revoked_by_derivation"],
        )
        for row in rows
    }
    assert shown == {
        1: (None, False, None, None),
        2: (1, True, "alice", None),
        3: (2, True, None, 2),
    }
    run = session.runs.order_by("-number").first()
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/context/").content.decode()
    assert "revoked by derivation from r2" in page


def test_the_migration_finds_the_derivation_of_views_saved_before_it(
    alice, gateway, make_demo_session
):
    session = make_demo_session(policy={"user_turns": 1})
    for n in range(6):
        ask(session, alice, f"NONCE-Q{n} question")
    views = SessionView.objects.filter(session=session).order_by("revision")
    saved = [view.derived_from_id for view in views]
    assert saved[0] is None and None not in saved[1:]
    views.update(derived_from=None)
    migration = importlib.import_module("sessions_app.migrations.0012_view_derivation")
    migration.fill_derivations(django_apps, None)
    assert [view.derived_from_id for view in views.all()] == saved
