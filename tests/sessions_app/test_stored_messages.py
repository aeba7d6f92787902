"""Large inline messages (handoff summaries) stored once per session, named by a marker.

A summary stays in every compaction snapshot and reusable view of the session until the next
summary; those rows hold a marker `{"once": key}` and the message is stored once
(`StoredMessage`). Every reader sees the message as the engine made it.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from agentloom import encryption
from sessions_app.models import CompactionSnapshot, Run, SessionView, StoredMessage
from sessions_app.selectors.checkpoints import frame_of, run_checkpoint
from sessions_app.selectors.stored_messages import ONCE, is_marker, messages_read
from sessions_app.selectors.views import view_content
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.export import export_lines
from sessions_app.services.fork import session_fork
from sessions_app.services.replay import replay_run
from sessions_app.services.stored_messages import ONCE_BYTES, stored_once
from tests.factories import ask, make_user

pytestmark = pytest.mark.django_db


def _tool(n: int) -> str:
    return f'/tool big_output {{"chars": 1500}} NONCE-{n}'


def _summarising_session(alice, make_demo_session, questions: int = 8):
    session = make_demo_session(context_window=9_000)
    for n in range(questions):
        ask(session, alice, _tool(n))
    return session


def _inline(entries: list[dict]) -> list:
    return [entry["m"] for entry in entries if "m" in entry]


def _summary_of(message: dict) -> bool:
    return "[handoff summary]" in json.dumps(message)


def test_a_summary_is_stored_once_however_many_snapshots_and_views_show_it(
    alice, gateway, make_demo_session
):
    session = _summarising_session(alice, make_demo_session)
    rows = list(CompactionSnapshot.objects.filter(run__session=session).order_by("pk"))
    markers = [m[ONCE] for row in rows for m in _inline(row.snapshot["view"]) if is_marker(m)]
    views = list(SessionView.objects.filter(session=session))
    markers += [m[ONCE] for view in views for m in view.messages if is_marker(m)]
    stored = dict(StoredMessage.objects.filter(session=session).values_list("key", "message"))
    # Some summary is shown by more than one row, and stored once.
    assert len(markers) > len(set(markers)) >= 1
    assert set(markers) == set(stored)
    assert all(_summary_of(message) for message in stored.values())
    # No row holds a summary inline; small messages (run notes, the system prompt) stay inline.
    for row in rows:
        inline = [m for m in _inline(row.snapshot["view"]) if not is_marker(m)]
        assert inline and not any(_summary_of(m) for m in inline)
        assert all(len(json.dumps(m)) < ONCE_BYTES for m in inline)
    # Every reader sees the summaries: the checkpoint, the view, a replay.
    for row in rows:
        read = run_checkpoint(row.run)
        for snapshot in read["context"]["compactions"]:
            assert not any(is_marker(m) for m in _inline(snapshot["view"]))
        report = replay_run(row.run)
        assert report.ok, "\n".join(report.differences)
    shown = [view_content(view)[0] for view in views]
    assert not any(is_marker(m) for messages in shown for m in messages)
    assert any(_summary_of(m) for messages in shown for m in messages)


def test_the_model_is_sent_the_summary_a_view_stores_once(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    view = SessionView.objects.filter(session=session).order_by("-revision").first()
    summary = next(m for m in messages_read(session.pk, view.messages) if _summary_of(m))
    gateway.requests.clear()
    ask(session, alice, "NONCE-AFTER")
    assert summary in gateway.action_requests()[0].messages


def test_rows_saved_with_the_summary_inline_still_read(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    view = SessionView.objects.filter(session=session).order_by("-revision").first()
    before = view_content(view)
    assert any(_summary_of(m) for m in before[0])
    frame = frame_of(view.run).to_dict()
    # As saved before: every message inline, in the view and in its run's snapshots.
    SessionView.objects.filter(pk=view.pk).update(messages=messages_read(session.pk, view.messages))
    for snapshot in run_checkpoint(view.run)["context"]["compactions"]:
        CompactionSnapshot.objects.filter(run=view.run, revision=snapshot["revision"]).update(
            snapshot=snapshot
        )
    StoredMessage.objects.filter(session=session).delete()
    assert view_content(SessionView.objects.get(pk=view.pk)) == before
    assert frame_of(view.run).to_dict() == frame


def test_a_marker_without_its_message_is_an_error(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    view = SessionView.objects.filter(session=session).order_by("-revision").first()
    StoredMessage.objects.filter(session=session).delete()
    with pytest.raises(StoredMessage.DoesNotExist):
        view_content(view)


def test_the_digest_is_the_sessions_and_the_keys(alice, make_demo_session):
    one, two = make_demo_session(), make_demo_session()
    message = {"role": "user", "content": "x" * ONCE_BYTES}
    [marker] = stored_once(one.pk, [message])
    assert stored_once(one.pk, [dict(reversed(message.items()))]) == [marker]
    assert StoredMessage.objects.filter(session=one).count() == 1
    assert marker[ONCE] != stored_once(two.pk, [message])[0][ONCE]
    assert marker[ONCE] != encryption.message_digest(one.pk, {**message, "content": "y" * 2000})
    with override_settings(FIELD_ENCRYPTION_KEY="another field key for this test only"):
        assert encryption.message_digest(one.pk, message) != marker[ONCE]
    # Read back equal; a small message is never stored apart.
    assert messages_read(one.pk, [marker]) == [message]
    small = {"role": "system", "content": "[run note] run 1 succeeded"}
    assert stored_once(one.pk, [small]) == [small]


def test_a_fork_and_an_export_carry_the_summary(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    last = session.messages.filter(instance="main").order_by("-seq")[0]
    fork = session_fork(user=alice, session=session, seq=last.seq)
    copies = SessionView.objects.filter(session=fork)
    assert copies.exists()
    assert any(_summary_of(m) for copy in copies for m in view_content(copy)[0])
    # The fork stores its own copy (its rows go with it, not with the original).
    assert StoredMessage.objects.filter(session=fork).exists()
    lines = [json.loads(line) for line in export_lines(session, format="jsonl", exported_by="a")]
    views = [item for item in lines if item["type"] == "view"]
    assert views and all(not any(is_marker(m) for m in item["messages"]) for item in views)
    assert any(_summary_of(m) for item in views for m in item["messages"])


def test_stored_messages_go_with_their_session(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    other = _summarising_session(alice, make_demo_session, questions=5)
    assert StoredMessage.objects.filter(session=session).exists()
    kept = StoredMessage.objects.filter(session=other).count()
    session_delete(user=alice, session=session)
    session_purge(user=make_user("root", superuser=True), session_id=session.pk)
    assert not StoredMessage.objects.filter(session_id=session.pk).exists()
    assert StoredMessage.objects.filter(session=other).count() == kept > 0


def test_the_migration_stores_old_rows_messages_once_resumably(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    views = list(SessionView.objects.filter(session=session).order_by("pk"))
    snapshots = list(CompactionSnapshot.objects.filter(run__session=session).order_by("pk"))
    before = (
        [view_content(view) for view in views],
        {run.pk: frame_of(run).to_dict() for run in {row.run for row in snapshots}},
    )
    # As saved before: every message inline.
    for view in views:
        SessionView.objects.filter(pk=view.pk).update(
            messages=messages_read(session.pk, view.messages)
        )
    for run in {row.run for row in snapshots}:
        for snapshot in run_checkpoint(run)["context"]["compactions"]:
            CompactionSnapshot.objects.filter(run=run, revision=snapshot["revision"]).update(
                snapshot=snapshot
            )
    StoredMessage.objects.filter(session=session).delete()
    out = StringIO()
    call_command("store_messages_once", "--batch-size", "1", "--max-batches", "1", stdout=out)
    # Interrupted after one batch: the first snapshot is done, the next not yet.
    assert out.getvalue().startswith(f"up to snapshot {snapshots[0].pk}:")
    first, second = (CompactionSnapshot.objects.get(pk=row.pk).snapshot for row in snapshots[:2])
    assert any(is_marker(m) for m in _inline(first["view"])) or not any(
        _summary_of(m) for m in _inline(first["view"])
    )
    assert not any(is_marker(m) for m in _inline(second["view"]))
    call_command("store_messages_once", "--after-snapshot", str(snapshots[0].pk), stdout=out)
    call_command("store_messages_once", stdout=out)  # nothing left to do
    assert "of 0 row(s)" in out.getvalue().splitlines()[-1]
    for row in CompactionSnapshot.objects.filter(run__session=session):
        assert not any(_summary_of(m) for m in _inline(row.snapshot["view"]))
    for view in SessionView.objects.filter(session=session):
        assert not any(_summary_of(m) for m in view.messages)
    assert StoredMessage.objects.filter(session=session).exists()
    assert [view_content(view) for view in views] == before[0]
    assert {run: frame_of(Run.objects.get(pk=run)).to_dict() for run in before[1]} == before[1]


def test_the_admin_shows_a_views_summary_not_its_marker(alice, gateway, make_demo_session):
    session = _summarising_session(alice, make_demo_session)
    view = next(
        view
        for view in SessionView.objects.filter(session=session)
        if any(is_marker(m) for m in view.messages)
    )
    client = Client()
    client.force_login(make_user("root", superuser=True))
    page = client.get(f"/admin/sessions_app/sessionview/{view.pk}/change/")
    assert page.status_code == 200
    assert b"[handoff summary]" in page.content
    assert b'"once"' not in page.content and b"&quot;once&quot;" not in page.content
