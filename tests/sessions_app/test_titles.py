"""Titles are content: a session's title and its deletion audit's copy are stored encrypted.

A title is made from the first question, so it is encrypted like the question; lists, the API,
the console and the admin show it decrypted, and no text of a question stays in clear anywhere in
the database, not even after a purge.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from sessions_app.models import JournalTerms, Session, SessionDeletion
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.runs import run_ask, run_cancel, session_rename, supplement_add
from tests.api.factories import client_for
from tests.factories import ask, make_user
from tests.support.legacy_encryption import read_raw
from tests.support.plaintext import cells_holding

pytestmark = pytest.mark.django_db

NONCE = "NONCE-titlecase"


def test_a_title_from_the_question_is_encrypted_and_shown_decrypted(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, f"{NONCE} what is the weather\nsecond line")
    title = Session.objects.get(pk=session.pk).title
    assert title == f"{NONCE} what is the weather"
    raw = read_raw(Session, session.pk, "title")
    assert raw.startswith(b"\x01\x80") and NONCE.encode() not in raw  # a binary Fernet token
    api = client_for(alice)
    assert api.get(f"/api/v1/sessions/{session.pk}/").json()["title"] == title
    assert [item["title"] for item in api.get("/api/v1/sessions/").json()["results"]] == [title]
    browser = Client()
    browser.force_login(alice)
    assert title in browser.get("/").content.decode()
    root = Client()
    root.force_login(make_user("root", superuser=True))
    assert title in root.get("/admin/sessions_app/session/").content.decode()


def test_a_renamed_title_is_encrypted_and_a_later_question_keeps_it(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    session_rename(user=alice, session=session, title=f"renamed {NONCE}")
    ask(session, alice, "the first question")
    assert Session.objects.get(pk=session.pk).title == f"renamed {NONCE}"
    assert NONCE.encode() not in read_raw(Session, session.pk, "title")
    browser = Client()
    browser.force_login(alice)
    browser.post(f"/sessions/{session.pk}/rename/", {"title": f"again {NONCE}"})
    assert Session.objects.get(pk=session.pk).title == f"again {NONCE}"
    assert NONCE.encode() not in read_raw(Session, session.pk, "title")


def test_the_deletion_audit_keeps_the_title_encrypted(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, f"{NONCE} to be deleted")
    deletion = session_delete(user=alice, session=session)
    assert SessionDeletion.objects.get(pk=deletion.pk).session_title == f"{NONCE} to be deleted"
    assert NONCE.encode() not in read_raw(SessionDeletion, deletion.pk, "session_title")
    root = make_user("root", superuser=True)
    session_purge(user=root, session_id=session.pk)
    assert SessionDeletion.objects.get(pk=deletion.pk).session_title == f"{NONCE} to be deleted"
    admin = Client()
    admin.force_login(root)
    page = admin.get(f"/admin/sessions_app/sessiondeletion/{deletion.pk}/change/")
    assert f"{NONCE} to be deleted" in page.content.decode()


def test_no_question_text_is_in_clear_anywhere_in_the_database(alice, gateway, make_demo_session):
    root = make_user("root", superuser=True)
    # Alice is staff too: she deletes one session in the admin.
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_session", "delete_session"])
    )
    browser = Client()
    browser.force_login(alice)
    first, second = make_demo_session(), make_demo_session()
    ask(first, alice, f"{NONCE}-1 a first question")
    ask(first, alice, f'{NONCE}-2 /tool echo {{"text": "{NONCE}-3"}}')
    supplement_add(
        user=alice,
        run=run_ask(user=alice, session=second, question=f"{NONCE}-4"),
        text=f"{NONCE}-5",
    )
    browser.post(f"/sessions/{second.pk}/rename/", {"title": f"{NONCE}-6 renamed"})
    # The search index holds the questions' terms, as digests: scanned with the rest.
    assert JournalTerms.objects.filter(session=first).exists()
    assert cells_holding(NONCE) == [] and cells_holding(NONCE.lower()) == []
    # Deleted in the admin (whose log is stored in clear) and through the API, then purged.
    deleted = browser.post(f"/admin/sessions_app/session/{first.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    run_cancel(user=alice, run=second.runs.get())
    assert client_for(alice).delete(f"/api/v1/sessions/{second.pk}/").status_code == 204
    assert LogEntry.objects.get().object_repr == f"Session {first.pk}"
    assert cells_holding(NONCE) == []
    for session in (first, second):
        session_purge(user=root, session_id=session.pk)
    assert not Session.objects.filter(pk__in=[first.pk, second.pk]).exists()
    assert SessionDeletion.objects.count() == 2
    assert cells_holding(NONCE) == []


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_the_titles_already_stored(alice, make_demo_session):
    session = make_demo_session()
    deleted = make_demo_session()
    deletion = session_delete(user=alice, session=deleted)
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate([("sessions_app", "0009_session_soft_delete")])
    # Titles as the previous version stored them: in clear.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sessions_app_session SET title = %s WHERE id = %s", [NONCE, session.pk]
        )
        cursor.execute(
            "UPDATE sessions_app_sessiondeletion SET session_title = %s WHERE id = %s",
            [f"{NONCE} gone", deletion.pk],
        )
    assert cells_holding(NONCE) != []
    executor = MigrationExecutor(connection)
    executor.migrate(leaves)
    assert cells_holding(NONCE) == []
    assert Session.objects.get(pk=session.pk).title == NONCE
    assert Session.objects.get(pk=deleted.pk).title == ""
    assert SessionDeletion.objects.get(pk=deletion.pk).session_title == f"{NONCE} gone"
