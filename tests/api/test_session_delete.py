"""Deleting a session: hidden from everyone, no new runs, recorded outside the session."""

from __future__ import annotations

import pytest

from agentloom.errors import NotFound
from sessions_app.models import Run, Session, SessionDeletion
from sessions_app.services.runs import run_ask, run_resume, supplement_add
from tests.api.factories import client_for, finish, open_session

pytestmark = pytest.mark.django_db


def url(session) -> str:
    return f"/api/v1/sessions/{session.pk}/"


def test_the_creator_deletes_a_session_and_it_disappears(api, session, run, alice):
    finish(run, "succeeded")
    response = api.delete(url(session))
    assert response.status_code == 204
    assert response.content == b""
    assert api.get(url(session)).status_code == 404
    assert api.get("/api/v1/sessions/").json()["count"] == 0
    for path in (
        f"{url(session)}runs",
        f"{url(session)}messages",
        f"{url(session)}views/",
        f"/api/v1/runs/{run.pk}/",
        f"/api/v1/runs/{run.pk}/context",
        f"/api/v1/runs/{run.pk}/model-calls",
    ):
        assert api.get(path).status_code == 404, path
    # Nothing under it is removed: the journal stays until an operator purges it.
    assert Run.objects.filter(pk=run.pk).exists()
    audit = SessionDeletion.objects.get()
    assert (audit.session_number, audit.deleted_by, audit.deleted_by_username) == (
        session.pk,
        alice,
        "alice",
    )
    assert audit.deleted_at == Session.objects.get(pk=session.pk).deleted_at
    assert audit.purged_at is None


def test_a_space_admin_may_delete_a_members_session(version, carol, erin):
    session = open_session(version, carol)
    assert client_for(erin).delete(url(session)).status_code == 204
    assert SessionDeletion.objects.get().deleted_by == erin
    assert client_for(carol).get(url(session)).status_code == 404


def test_a_member_who_is_neither_creator_nor_admin_gets_403(session, carol):
    response = client_for(carol).delete(url(session))
    assert response.status_code == 403
    assert Session.objects.get(pk=session.pk).deleted_at is None
    assert not SessionDeletion.objects.exists()


def test_outside_the_space_it_is_404(session, bob, anon):
    assert client_for(bob).delete(url(session)).status_code == 404
    assert anon.delete(url(session)).status_code == 401
    assert client_for(bob).delete("/api/v1/sessions/99999999/").status_code == 404
    assert Session.objects.get(pk=session.pk).deleted_at is None


def test_a_session_with_an_active_run_is_409(api, session, run):
    response = api.delete(url(session))
    assert response.status_code == 409
    assert "active" in response.json()["detail"]
    assert Session.objects.get(pk=session.pk).deleted_at is None
    finish(run, "cancelled")
    assert api.delete(url(session)).status_code == 204


def test_deleting_twice_is_404(api, session):
    assert api.delete(url(session)).status_code == 204
    assert api.delete(url(session)).status_code == 404
    assert SessionDeletion.objects.count() == 1


def test_a_deleted_session_takes_no_new_run_resume_or_supplement(api, session, run, alice):
    finish(run, "failed", error="worker_lost")
    assert api.delete(url(session)).status_code == 204
    assert api.post(f"{url(session)}runs", {"question": "more?"}, "json").status_code == 404
    assert api.post(f"/api/v1/runs/{run.pk}/resume", {}, "json").status_code == 404
    assert (
        api.post(f"/api/v1/runs/{run.pk}/supplements", {"text": "and?"}, "json").status_code == 404
    )
    # The services refuse too, whatever object the caller holds.
    session.refresh_from_db()
    run.refresh_from_db()
    with pytest.raises(NotFound):
        run_ask(user=alice, session=session, question="more?")
    with pytest.raises(NotFound):
        run_resume(user=alice, run=run)
    with pytest.raises(NotFound):
        supplement_add(user=alice, run=run, text="and?")
    assert Run.objects.filter(session=session).count() == 1


def test_a_run_whose_worker_died_does_not_block_the_delete(api, session, run):
    from datetime import timedelta

    from django.utils import timezone

    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert api.delete(url(session)).status_code == 204
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "worker_lost")


def test_a_deleted_session_is_gone_from_the_console(session, alice):
    from django.test import Client

    browser = Client()
    browser.force_login(alice)
    assert browser.get(f"/sessions/{session.pk}/").status_code == 200
    client_for(alice).delete(url(session))
    assert browser.get(f"/sessions/{session.pk}/").status_code == 404
    assert browser.get(f"/sessions/{session.pk}/journal/").status_code == 404
    assert "Alice" not in browser.get("/").content.decode() or session.title == ""
    assert f"/sessions/{session.pk}/" not in browser.get("/").content.decode()


def _race(session, user) -> dict[str, str]:
    """Delete `session` and ask in it at the same moment, on two connections."""
    import threading

    from django.db import connections

    from agentloom.errors import ApplicationError
    from sessions_app.services.deletion import session_delete

    barrier = threading.Barrier(2)
    results = {}
    calls = {
        "delete": lambda: session_delete(user=user, session=session),
        "ask": lambda: run_ask(user=user, session=session, question="q"),
    }

    def act(name):
        try:
            barrier.wait(timeout=10)
            calls[name]()
            results[name] = "ok"
        except ApplicationError as error:
            results[name] = type(error).__name__
        finally:
            connections.close_all()

    threads = [threading.Thread(target=act, args=(name,)) for name in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_delete_racing_a_question_never_leaves_a_run_in_a_hidden_session(version, alice):
    for _ in range(6):
        session = open_session(version, alice)
        results = _race(session, alice)
        hidden = Session.objects.get(pk=session.pk).deleted_at is not None
        has_run = Run.objects.filter(session=session).exists()
        # Either the question came first (the delete is refused: 409) or the delete did (404).
        assert (results, hidden, has_run) in (
            ({"delete": "ok", "ask": "NotFound"}, True, False),
            ({"delete": "Conflict", "ask": "ok"}, False, True),
        )
