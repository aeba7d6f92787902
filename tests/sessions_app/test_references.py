"""Journal references: written once per snapshot, as ranges, kept and migrated from old rows."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db.models import RestrictedError

from agentloom.engine import as_ranges
from context_app.engine_adapter import version_binding
from sessions_app.models import JournalReference, Run, Session, SessionMessage, SessionView
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.selectors.context import run_context
from sessions_app.selectors.history import history_for_new_run
from sessions_app.selectors.views import referenced_seqs, view_content, view_references
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.replay import replay_run
from tests.factories import ask, make_user
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _tool(n: int) -> str:
    return f'/tool big_output {{"chars": 1500}} NONCE-{n}'


def _summarised_session(alice, make_demo_session):
    """A session whose compactions both mask tool results and summarise long questions."""
    session = make_demo_session(context_window=9_000)
    for n in range(3):
        ask(session, alice, _tool(n))
    for n in range(3, 8):
        ask(session, alice, long_question(n))
        ask(session, alice, _tool(n))
    assert SessionView.objects.filter(session=session).exists()
    return session


def _ranges(session) -> set[tuple]:
    return set(
        JournalReference.objects.filter(message__session=session).values_list(
            "run_id", "snapshot_revision", "view_id", "message__seq", "last__seq"
        )
    )


def test_references_are_written_once_and_every_reader_finds_them(alice, gateway, make_demo_session):
    session = _summarised_session(alice, make_demo_session)
    views = list(SessionView.objects.filter(session=session))
    # No view has rows of its own: the snapshot it was saved from keeps its records.
    assert not JournalReference.objects.filter(view__in=views).exists()
    for view in views:
        referenced = {entry["s"] for entry in view.entries if "s" in entry}
        assert referenced <= referenced_seqs(view_references(view))
        messages, _ = view_content(view)
        assert len(messages) == len(view.entries)
    # Ranges: fewer rows than the records they keep, running across the statuses between turns.
    rows = JournalReference.objects.filter(run__session=session)
    kept = referenced_seqs(rows)
    assert rows.count() < len(kept)
    statuses = set(
        SessionMessage.objects.filter(session=session, kind="status").values_list("seq", flat=True)
    )
    assert kept & statuses
    # The next run reuses a view; checkpoints load and replay; the Context page reads them.
    assert history_for_new_run(session, version_binding(session.agent_version)).view_revision
    for run in session.runs.all():
        assert frame_of(run) is not None
        assert run_context(run)["compactions"] is not None
        report = replay_run(run)
        assert report.ok, "\n".join(report.differences)


def test_a_masking_only_compaction_saves_no_view(alice, gateway, make_demo_session, monkeypatch):
    # Before compaction version 5: from 5 a masking is saved (`test_run_boundary`).
    monkeypatch.setattr("agentloom.engine._compaction_versions.CURRENT_COMPACTION", 4)
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, _tool(n)) for n in range(4)]
    stages = [
        snapshot["metrics"]["reason"] for run in runs for snapshot in frame_of(run).compactions
    ]
    assert stages and set(stages) == {"masked"}
    assert not SessionView.objects.filter(session=session).exists()
    # The snapshots still keep the records they refer to.
    assert JournalReference.objects.filter(run__session=session).exists()


def test_a_summary_compaction_still_saves_a_view(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(5):
        ask(session, alice, long_question(n))
    assert SessionView.objects.filter(session=session).exists()


def test_a_range_keeps_its_ends_and_goes_with_its_session(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(4):
        ask(session, alice, _tool(n))
    reference = next(
        row
        for row in JournalReference.objects.filter(run__session=session).select_related(
            "message", "last"
        )
        if row.last.seq > row.message.seq
    )
    for end in (reference.message, reference.last):
        with pytest.raises(RestrictedError):
            SessionMessage.objects.filter(pk=end.pk).delete()
    root = make_user("root", superuser=True)
    session_delete(user=alice, session=session)
    session_purge(user=root, session_id=session.pk)
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not JournalReference.objects.filter(pk=reference.pk).exists()
    assert not SessionMessage.objects.filter(pk__in=[reference.message_id, reference.last_id])


def _as_written_before_ranges(session) -> int:
    """Rewrite the session's references as the code before ranges did: one row per record
    shown, for the snapshot and again for each view saved from it. Returns the rows written."""
    rows = list(JournalReference.objects.filter(message__session=session))
    statuses = set(
        SessionMessage.objects.filter(session=session, kind="status").values_list("seq", flat=True)
    )
    ids = dict(SessionMessage.objects.filter(session=session).values_list("seq", "pk"))
    old = []
    for row in rows:
        seqs = [
            seq
            for seq in range(row.message.seq, row.last.seq + 1)
            if seq not in statuses and seq in ids
        ]
        views = SessionView.objects.filter(
            run_id=row.run_id, snapshot_revision=row.snapshot_revision
        )
        for seq in seqs:
            old.append(
                JournalReference(
                    message_id=ids[seq], run_id=row.run_id, snapshot_revision=row.snapshot_revision
                )
            )
            old += [JournalReference(message_id=ids[seq], view=view) for view in views]
    JournalReference.objects.filter(pk__in=[row.pk for row in rows]).delete()
    JournalReference.objects.bulk_create(old)
    return len(old)


def test_the_reference_migration_is_resumable_and_idempotent(alice, gateway, make_demo_session):
    session = _summarised_session(alice, make_demo_session)
    written = _ranges(session)
    old = _as_written_before_ranges(session)
    assert old > len(written)

    # Interrupted after one batch: part converted, the rest still per record and still held.
    call_command("migrate_references", "--batch-size", "3", "--max-batches", "1")
    left = JournalReference.objects.filter(last__isnull=True).count()
    assert 0 < left == old - 3
    for view in SessionView.objects.filter(session=session):
        # Old rows and ranges side by side: what each view refers to is still held.
        referenced = {entry["s"] for entry in view.entries if "s" in entry}
        assert referenced <= referenced_seqs(view_references(view))
    call_command("migrate_references", "--batch-size", "3")
    assert not JournalReference.objects.filter(last__isnull=True).exists()
    # The same ranges the writer writes today: batch seams joined, views' copies dropped.
    assert _ranges(session) == written
    call_command("migrate_references")
    assert _ranges(session) == written
    for view in SessionView.objects.filter(session=session):
        view_content(view)


def _stood_for(view) -> tuple[set[int], set[int]]:
    """The records a view's summaries stand for (`src`), and the records it shows (`s`)."""
    stood = {
        seq
        for entry in view.entries
        for first, last in entry.get("src") or []
        for seq in range(first, last + 1)
    }
    return stood, {entry["s"] for entry in view.entries if "s" in entry}


def test_a_summary_stands_for_a_long_prefix_in_one_range(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, long_question(n)) for n in range(12)]
    kinds = dict(SessionMessage.objects.filter(session=session).values_list("seq", "kind"))
    views = list(SessionView.objects.filter(session=session).order_by("revision"))
    assert len(views) >= 6
    for view in views:
        # One range over the statuses between turns, however many turns it summarises...
        assert [len(entry["src"]) for entry in view.entries if "src" in entry] == [1], view.entries
        stood, shown = _stood_for(view)
        # ...standing for exactly the prefix: every record up to the watermark is summarised or
        # shown, never both; the only other records the range runs over are statuses.
        assert not stood & shown
        prefix = {seq for seq, kind in kinds.items() if seq <= view.watermark and kind != "status"}
        assert prefix == (stood | shown) - {s for s in stood if kinds[s] == "status"}
    # The snapshot and the Context page name a range or two as well, not one per turn.
    last = Run.objects.get(pk=runs[-1].pk)
    assert all(len(c["sources"]["session"]) <= 2 for c in frame_of(last).compactions)
    assert all(len(c["summarised_ranges"]) <= 2 for c in run_context(last)["compactions"])


def test_a_summary_saved_one_range_per_turn_still_reads_and_joins(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    for n in range(6):
        ask(session, alice, long_question(n))
    view = SessionView.objects.filter(session=session).order_by("-revision")[0]
    kinds = dict(SessionMessage.objects.filter(session=session).values_list("seq", "kind"))
    stood, _ = _stood_for(view)
    # As views were saved before: split at every status record.
    split = as_ranges({seq for seq in stood if kinds[seq] != "status"})
    assert len(split) > 2
    view.entries = [{**e, "src": split} if "src" in e else e for e in view.entries]
    view.save(update_fields=["entries"])
    assert history_for_new_run(session, version_binding(session.agent_version)).view_revision
    ask(session, alice, long_question(6))
    newest = SessionView.objects.filter(session=session).order_by("-revision")[0]
    assert newest.revision > view.revision
    assert [len(entry["src"]) for entry in newest.entries if "src" in entry] == [1]
    assert _stood_for(newest)[0] >= stood
