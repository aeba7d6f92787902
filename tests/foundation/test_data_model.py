"""Rules the database itself enforces: encryption at rest, uniqueness, one active run, frozen
published versions."""

import threading

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.db.utils import DatabaseError
from django.utils import timezone

from agentloom.spaces.models import Membership
from context_app.models import AgentVersion, PublishedVersionImmutable
from sessions_app.models import Run, SessionMessage
from tests.factories import (
    make_agent,
    make_connection,
    make_run,
    make_session,
    make_space,
    make_user,
    make_version,
)

pytestmark = pytest.mark.django_db

SECRET_TEXT = "NONCE-7f3a9c plaintext that must never reach the disk"
SECRET_KEY = "sk-test-NONCE-c0ffee1234567890"


@pytest.fixture
def session(alice):
    space = make_space(admin=alice)
    connection_row = make_connection(space, api_key=SECRET_KEY)
    version = make_version(make_agent(space, alice, connection=connection_row))
    return make_session(version, alice)


def _raw(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        value = cursor.fetchone()[0]
    return bytes(value) if not isinstance(value, bytes | str) else value


def _journal_row(session, run, entry_key, seq, message=None):
    return SessionMessage(
        session=session,
        seq=seq,
        run=run,
        instance="main",
        kind="user_input",
        entry_key=entry_key,
        message=message or {"role": "user", "content": "hi"},
        created_at=timezone.now(),
    )


def test_journal_message_and_api_key_are_encrypted_at_rest(session):
    run = make_run(session, question=SECRET_TEXT)
    row = _journal_row(session, run, "user_input", 1, {"role": "user", "content": SECRET_TEXT})
    row.save()

    raw_message = _raw("SELECT message FROM sessions_app_sessionmessage WHERE id = %s", [row.pk])
    raw_question = _raw("SELECT question FROM sessions_app_run WHERE id = %s", [run.pk])
    raw_key = _raw(
        "SELECT api_key FROM models_app_modelconnection WHERE id = %s",
        [session.agent.model_connection_id],
    )
    for raw in (raw_message, raw_question, raw_key):
        blob = raw if isinstance(raw, bytes) else raw.encode()
        assert b"NONCE" not in blob
        assert b"plaintext" not in blob and b"sk-test" not in blob

    assert SessionMessage.objects.get(pk=row.pk).message["content"] == SECRET_TEXT
    assert Run.objects.get(pk=run.pk).question == SECRET_TEXT
    assert session.agent.model_connection.__class__.objects.get().api_key == SECRET_KEY
    # Index fields stay in clear so the journal can be ordered and filtered in SQL.
    assert _raw("SELECT kind FROM sessions_app_sessionmessage WHERE id = %s", [row.pk]) == (
        "user_input"
    )


def test_large_payloads_are_compressed_before_they_are_encrypted(session):
    run = make_run(session)
    text = " ".join(f"word{n % 97} NONCE-{n % 13}" for n in range(2_000))
    row = _journal_row(session, run, "user_input", 1, {"role": "user", "content": text})
    row.save()
    raw = _raw("SELECT message FROM sessions_app_sessionmessage WHERE id = %s", [row.pk])
    assert b"NONCE" not in raw and b"word" not in raw
    # The token is far smaller than the text: compressed first, since ciphertext cannot be.
    assert len(raw) < len(text) / 4
    assert SessionMessage.objects.get(pk=row.pk).message["content"] == text


def test_payloads_written_before_compression_are_still_read(session):
    from tests.support.legacy_encryption import legacy_token, store_raw

    run = make_run(session)
    # How the journal column was written before compression (and before the Fernet format).
    old = legacy_token({"role": "user", "content": SECRET_TEXT})
    row = _journal_row(session, run, "user_input", 1)
    row.save()
    store_raw(SessionMessage, row.pk, "message", old)
    assert SessionMessage.objects.get(pk=row.pk).message["content"] == SECRET_TEXT


def test_duplicate_entry_key_is_refused_by_the_database(session):
    run = make_run(session)
    _journal_row(session, run, "user_input", 1).save()
    with pytest.raises(IntegrityError), transaction.atomic():
        _journal_row(session, run, "user_input", 2).save()


def test_duplicate_session_seq_is_refused_by_the_database(session):
    run = make_run(session)
    _journal_row(session, run, "a", 1).save()
    with pytest.raises(IntegrityError), transaction.atomic():
        _journal_row(session, run, "b", 1).save()


def test_insert_or_ignore_leaves_one_row(session):
    run = make_run(session)
    for _ in range(3):
        SessionMessage.objects.bulk_create(
            [_journal_row(session, run, "user_input", 1)], ignore_conflicts=True
        )
    assert SessionMessage.objects.filter(run=run).count() == 1


def test_second_active_run_is_refused_by_the_database(session):
    make_run(session, status="running")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_run(session, status="queued")
    make_run(session, status="failed")  # finished runs do not count


def test_published_version_refuses_orm_save(session):
    version = session.agent_version
    version.snapshot = {"system_prompt": "changed"}
    with pytest.raises(PublishedVersionImmutable):
        version.save()


def test_published_version_refuses_queryset_update(session):
    with pytest.raises(DatabaseError), transaction.atomic():
        AgentVersion.objects.filter(pk=session.agent_version_id).update(snapshot={"x": 1})
    assert AgentVersion.objects.get(pk=session.agent_version_id).snapshot != {"x": 1}


def test_published_version_refuses_raw_sql(session):
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE context_app_agentversion SET number = 99 WHERE id = %s",
            [session.agent_version_id],
        )
    assert AgentVersion.objects.get(pk=session.agent_version_id).number == 1


def test_published_version_is_read_only_in_the_admin(client, session):
    root = make_user("root", superuser=True)
    client.force_login(root)
    url = f"/admin/context_app/agentversion/{session.agent_version_id}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    response = client.post(url, {"number": 5, "snapshot": "{}"})
    assert response.status_code == 403
    assert AgentVersion.objects.get(pk=session.agent_version_id).number == 1


def test_admin_never_shows_the_api_key(client, session):
    root = make_user("root", superuser=True)
    client.force_login(root)
    connection_id = session.agent.model_connection_id
    page = client.get(f"/admin/models_app/modelconnection/{connection_id}/change/")
    assert page.status_code == 200
    assert SECRET_KEY.encode() not in page.content


def test_encrypted_payloads_are_shown_to_superusers_only(client, session):
    from django.contrib.auth.models import Permission

    run = make_run(session, question=SECRET_TEXT)
    staff = make_user("staff", staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(staff)
    # Outside the session's space, the run does not exist for her (the admin is scoped).
    assert client.get(f"/admin/sessions_app/run/{run.pk}/change/").status_code == 302
    Membership.objects.create(space=session.space, user=staff, role=Membership.Role.ADMIN)
    page = client.get(f"/admin/sessions_app/run/{run.pk}/change/")
    assert page.status_code == 200
    assert b"NONCE-7f3a9c" not in page.content
    assert b"visible to superusers only" in page.content

    client.force_login(make_user("root", superuser=True))
    page = client.get(f"/admin/sessions_app/run/{run.pk}/change/")
    assert b"NONCE-7f3a9c" in page.content


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_active_runs_on_two_connections_yield_one_conflict():
    owner = make_user("racer")
    space = make_space(admin=owner)
    session = make_session(make_version(make_agent(space, owner)), owner)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create(number):
        try:
            barrier.wait(timeout=10)
            with transaction.atomic():
                Run.objects.create(session=session, number=number, status="queued", question="q")
            outcomes.append("created")
        except IntegrityError:
            outcomes.append("conflict")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create, args=(n,)) for n in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["conflict", "created"]
    assert Run.objects.filter(session=session).count() == 1
