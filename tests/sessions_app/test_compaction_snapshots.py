"""Compaction snapshots stored once, apart: a checkpoint points to them, old ones still read."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db.models import RestrictedError

from sessions_app.models import CompactionSnapshot, Run, SessionView
from sessions_app.selectors.checkpoints import (
    SNAPSHOT_POINTER,
    frame_of,
    pointed_snapshots,
    run_checkpoint,
)
from sessions_app.selectors.context import run_context
from sessions_app.services.deletion import session_delete, session_purge
from sessions_app.services.replay import replay_run
from tests.factories import ask, make_user
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _tool(n: int) -> str:
    return f'/tool big_output {{"chars": 1500}} NONCE-{n}'


def _compacting_session(alice, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(3):
        ask(session, alice, _tool(n))
    for n in range(3, 6):
        ask(session, alice, long_question(n))
    assert SessionView.objects.filter(session=session).exists()
    return session


def test_a_checkpoint_points_to_its_snapshots_stored_once(alice, gateway, make_demo_session):
    session = _compacting_session(alice, make_demo_session)
    runs = [run for run in session.runs.all() if frame_of(run).compactions]
    assert runs
    for run in runs:
        stored = run.checkpoint["context"]["compactions"]
        assert all(snapshot.get(SNAPSHOT_POINTER) and "view" not in snapshot for snapshot in stored)
        rows = set(CompactionSnapshot.objects.filter(run=run).values_list("instance", "revision"))
        assert pointed_snapshots(run.checkpoint) == rows
        whole = run_checkpoint(run)["context"]["compactions"]
        assert [snapshot["revision"] for snapshot in whole] == [s["revision"] for s in stored]
        assert all("view" in snapshot for snapshot in whole)
        assert run_context(run)["compactions"]
        report = replay_run(run)
        assert report.ok, "\n".join(report.differences)
    # Each view refers to the stored snapshot it was saved from.
    for view in SessionView.objects.filter(session=session):
        assert (view.snapshot.run_id, view.snapshot.revision) == (
            view.run_id,
            view.snapshot_revision,
        )


def test_a_checkpoint_that_embeds_its_snapshots_still_reads(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, _tool(n)) for n in range(4)]
    run = next(run for run in runs if frame_of(run).compactions)
    before = frame_of(run).to_dict()
    # As saved before snapshots were stored apart: embedded, no row (and no view of a masking,
    # which compaction 5 saves and which refers to its snapshot row).
    Run.objects.filter(pk=run.pk).update(checkpoint=run_checkpoint(run))
    SessionView.objects.filter(run=run).delete()
    CompactionSnapshot.objects.filter(run=run).delete()
    run = Run.objects.get(pk=run.pk)
    assert not pointed_snapshots(run.checkpoint)
    assert frame_of(run).to_dict() == before
    assert run_context(run)["compactions"]
    report = replay_run(run)
    assert report.ok, "\n".join(report.differences)


def test_a_pointer_to_a_missing_snapshot_is_an_error(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, _tool(n)) for n in range(4)]
    run = next(run for run in runs if pointed_snapshots(run.checkpoint))
    SessionView.objects.filter(run=run).delete()
    CompactionSnapshot.objects.filter(run=run).delete()
    with pytest.raises(CompactionSnapshot.DoesNotExist):
        frame_of(run)


def test_a_snapshot_a_view_refers_to_is_kept_until_its_session_goes(
    alice, gateway, make_demo_session
):
    session = _compacting_session(alice, make_demo_session)
    # The newest view: no view derives from it (that would keep it on its own).
    view = (
        SessionView.objects.filter(session=session, derived_views__isnull=True)
        .select_related("snapshot")
        .order_by("-revision")
        .first()
    )
    with pytest.raises(RestrictedError):
        view.snapshot.delete()
    assert SessionView.objects.filter(pk=view.pk, snapshot__isnull=False).exists()
    session_delete(user=alice, session=session)
    root = make_user("root", superuser=True)
    removed = session_purge(user=root, session_id=session.pk)
    assert removed["CompactionSnapshot"] > 0
    assert not CompactionSnapshot.objects.filter(run__session_id=session.pk).exists()


def test_the_snapshot_migration_is_resumable_and_idempotent(alice, gateway, make_demo_session):
    session = _compacting_session(alice, make_demo_session)
    runs = [run for run in session.runs.order_by("pk") if pointed_snapshots(run.checkpoint)]
    assert len(runs) >= 2
    before = {run.pk: frame_of(run).to_dict() for run in runs}
    # As saved before: embedded snapshots, no rows, views without their snapshot.
    for run in runs:
        Run.objects.filter(pk=run.pk).update(checkpoint=run_checkpoint(run))
    SessionView.objects.filter(session=session).update(snapshot=None)
    CompactionSnapshot.objects.filter(run__session=session).delete()
    out = StringIO()
    first = ["--after", str(runs[0].pk - 1), "--batch-size", "1", "--max-batches", "1"]
    call_command("store_snapshots", *first, stdout=out)
    # Interrupted after one batch: the first run is done, the next not yet.
    assert CompactionSnapshot.objects.filter(run=runs[0]).exists()
    assert not CompactionSnapshot.objects.filter(run=runs[1]).exists()
    last = int(out.getvalue().split("up to run ")[1].split(":")[0])
    assert last == runs[0].pk
    call_command("store_snapshots", "--after", str(last), stdout=StringIO())
    call_command("store_snapshots", stdout=out)  # nothing left to do
    assert "of 0 run(s)" in out.getvalue().splitlines()[-1]
    for run in runs:
        run = Run.objects.get(pk=run.pk)
        assert all(s.get(SNAPSHOT_POINTER) for s in run.checkpoint["context"]["compactions"])
        assert frame_of(run).to_dict() == before[run.pk]
    assert not SessionView.objects.filter(session=session, snapshot__isnull=True).exists()
