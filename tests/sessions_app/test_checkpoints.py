"""Checkpoints and views by reference: nothing copied, everything rebuilt exactly."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.models import F, RestrictedError

from context_app.engine_adapter import version_binding
from sessions_app.models import JournalReference, Run, SessionMessage, SessionView
from sessions_app.selectors.checkpoints import frame_of, full_checkpoint
from sessions_app.selectors.views import compliant_view, referenced_seqs, view_references
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_resume
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _stored(run: Run) -> str:
    return json.dumps(Run.objects.get(pk=run.pk).checkpoint, ensure_ascii=False)


def test_a_checkpoint_holds_no_record_and_no_copy_of_inherited_history(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-FIRST-RESULT"}')
    ask(session, alice, "NONCE-SECOND-QUESTION")
    third = ask(session, alice, '/tool echo {"text": "NONCE-THIRD"} NONCE-QUESTION-3')
    stored = Run.objects.get(pk=third.pk).checkpoint
    assert stored["format"] == 2
    assert "records" not in stored["context"]
    text = _stored(third)
    # Neither the inherited history nor the run's own records are copied into the checkpoint
    # (its execution state keeps the candidate answer, which cites the tool result).
    for marker in ("NONCE-FIRST-RESULT", "NONCE-SECOND-QUESTION", "NONCE-QUESTION-3"):
        assert marker not in text
    # Yet the model saw them, and the frame rebuilt from the journal shows them again.
    rebuilt = json.dumps(frame_of(third).messages)
    for marker in ("NONCE-FIRST-RESULT", "NONCE-SECOND-QUESTION", "NONCE-QUESTION-3"):
        assert marker in rebuilt
    assert stored["context"]["inherited"]["history"]["count"] > 0


def test_the_rebuilt_view_is_the_view_the_model_was_last_shown(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "one"}')
    run = ask(session, alice, '/tool echo {"text": "two"}')
    last_request = gateway.action_requests()[-1].messages
    rebuilt = frame_of(run).messages
    # The final answer was appended after the last request; everything before is identical.
    assert json.dumps(rebuilt[: len(last_request)]) == json.dumps(last_request)


def test_compacting_sessions_replay_exactly_from_checkpoints_by_reference(
    alice, gateway, make_demo_session
):
    session = make_demo_session(context_window=9_000)
    # Tool results that compaction masks, then questions it must summarise.
    runs = [ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}') for n in range(3)]
    runs += [ask(session, alice, long_question(n)) for n in range(3, 7)]
    assert SessionView.objects.filter(session=session).exists(), "views are reused"
    assert any(full_checkpoint(run)["context"]["compactions"] for run in runs)
    for run in runs:
        assert Run.objects.get(pk=run.pk).checkpoint["format"] == 2
        report = replay_run(Run.objects.get(pk=run.pk))
        assert report.ok, "\n".join(report.differences)


def test_views_store_only_what_exists_nowhere_else(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(5):
        ask(session, alice, long_question(n))
    view = SessionView.objects.filter(session=session).order_by("-revision").first()
    assert view.entries, "the view is stored by reference"
    inline = json.dumps(view.messages)
    assert "[handoff summary]" in inline
    assert "NONCE-4" not in inline  # kept records are referenced, not copied
    referenced = {entry["s"] for entry in view.entries if "s" in entry}
    kept = referenced_seqs(view_references(view))
    assert referenced and referenced <= kept
    # Ranges run across the status records between turns, which no view shows.
    between = SessionMessage.objects.filter(session=session, seq__in=kept - referenced)
    assert set(between.values_list("kind", flat=True)) <= {SessionMessage.Kind.STATUS}
    # Written once: the view is kept by the references of the snapshot it was saved from.
    assert not view.references.exists()


def test_choosing_a_view_decrypts_no_candidate(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(5):
        ask(session, alice, long_question(n))
    chosen = compliant_view(session, version_binding(session.agent_version))
    assert chosen is not None
    assert {"messages"} <= chosen.get_deferred_fields()


def test_a_referenced_journal_record_cannot_be_deleted(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    for n in range(5):
        ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}')
    reference = (
        JournalReference.objects.filter(run__session=session)
        .exclude(last=F("message"))
        .select_related("message", "last")
        .first()
    )
    assert reference is not None, "a range of several records"
    # Both ends of a range are held (the records between by the journal's append-only rule).
    for message in (reference.message, reference.last):
        with pytest.raises(RestrictedError):
            message.delete()
        # Below the ORM too: the database's foreign key refuses it (checked at once).
        with pytest.raises(IntegrityError), transaction.atomic():
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute(
                    f"DELETE FROM {SessionMessage._meta.db_table} WHERE id = %s", [message.pk]
                )
            if connection.vendor == "sqlite":
                connection.check_constraints()
        assert SessionMessage.objects.filter(pk=message.pk).exists()


def _as_format_1(run: Run) -> None:
    """Store the run's checkpoint as the code before references did."""
    Run.objects.filter(pk=run.pk).update(checkpoint=full_checkpoint(run))
    SessionMessage.objects.filter(run=run).update(local_seq=None)
    JournalReference.objects.filter(run=run).delete()


def test_a_format_1_checkpoint_resumes_and_is_rewritten_by_reference(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    ask(session, alice, "NONCE-BEFORE")
    run = ask(session, alice, "NONCE-FAILING [boom]")
    assert run.status == Run.Status.FAILED
    _as_format_1(run)
    assert Run.objects.get(pk=run.pk).checkpoint["format"] == 1
    before = full_checkpoint(Run.objects.get(pk=run.pk))

    run_resume(user=alice, run=run)
    Run.objects.filter(pk=run.pk).update(question="NONCE-FAILING")  # the retry succeeds
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.checkpoint["format"] == 2
    after = full_checkpoint(run)
    # The old view continues unchanged, and every record is journaled once, in order.
    assert after["messages"][: len(before["messages"])] == before["messages"]
    keys = list(
        SessionMessage.objects.filter(run=run).order_by("seq").values_list("entry_key", flat=True)
    )
    assert len(keys) == len(set(keys))
    assert (
        not SessionMessage.objects.filter(run=run, local_seq=None)
        .exclude(kind="status", entry_key="status:1")
        .exists()
    )


def test_migrate_checkpoints_rewrites_format_1_without_changing_the_frame(
    alice, gateway, make_demo_session, capsys
):
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}') for n in range(4)]
    frames = {}
    for run in runs:
        frames[run.pk] = full_checkpoint(run)
        _as_format_1(run)
    call_command("migrate_checkpoints")
    assert "migrated 4 checkpoint(s)" in capsys.readouterr().out
    for run in runs:
        run.refresh_from_db()
        assert run.checkpoint["format"] == 2
        assert json.dumps(full_checkpoint(run)) == json.dumps(frames[run.pk])
    call_command("migrate_checkpoints")
    assert "migrated 0 checkpoint(s)" in capsys.readouterr().out


def _save_cost(make_demo_session, alice, records: int) -> tuple[int, int]:
    """Return (queries, stored checkpoint bytes) of one save of a run that has `records`."""
    from django.test.utils import CaptureQueriesContext

    from agentloom.engine import Checkpoint, InstanceFrame, Record
    from sessions_app.services.journal import JournalWriter
    from tests.factories import make_run

    session = make_demo_session()
    run = make_run(session, status="running", number=1)
    writer = JournalWriter(run, lease_owner=None)
    frame = InstanceFrame(instance="main", messages=[{"role": "system", "content": "s"}])
    for n in range(1, records + 2):
        message = {"role": "assistant", "content": f"step {n}"}
        frame.add_record(
            Record(n, "assistant", message, f"assistant:{n}", "2026-11-30T00:00:00+00:00")
        )
        frame.show(message, {"own": n})
        if n == records:
            writer.sync(Checkpoint.of(frame))
            frame.mark_saved()
    with CaptureQueriesContext(connection) as queries:
        writer.sync(Checkpoint.of(frame))  # one new record
    return len(queries), len(_stored(run))


def test_a_save_costs_the_same_on_a_long_run_as_on_a_short_one(alice, make_demo_session):
    short_queries, short_bytes = _save_cost(make_demo_session, alice, 5)
    long_queries, long_bytes = _save_cost(make_demo_session, alice, 2_000)
    assert long_queries == short_queries
    # Only the numbers grow (a seq of 2,001 instead of 6); nothing is copied per record.
    assert long_bytes - short_bytes < 32


def test_replay_matches_on_runs_stored_in_either_format(alice, gateway, make_demo_session):
    session = make_demo_session(context_window=9_000)
    runs = []
    for n in range(4):
        runs.append(ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}'))
        if n in (1, 3):
            # Before the runs after it read its rows, as they were: without local seqs.
            _as_format_1(runs[-1])
    for run in runs:
        run = Run.objects.get(pk=run.pk)
        report = replay_run(run)
        assert report.ok, "\n".join(report.differences)
    assert [Run.objects.get(pk=r.pk).checkpoint["format"] for r in runs] == [2, 1, 2, 1]


def test_compactions_list_the_journal_ranges_they_summarised(alice, gateway, make_demo_session):
    from sessions_app.selectors.context import run_context

    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, long_question(n)) for n in range(5)]
    succeeded = [
        (run, item)
        for run in runs
        for item in run_context(Run.objects.get(pk=run.pk))["compactions"]
        if item["outcome"] == "succeeded"
    ]
    assert succeeded
    journal = dict(SessionMessage.objects.filter(session=session).values_list("seq", "kind"))
    for run, item in succeeded:
        assert item["stage"] == "summary" and item["masked_ranges"] == []
        assert item["summarised_ranges"], item
        seqs = [s for a, b in item["summarised_ranges"] for s in range(a, b + 1)]
        # Every range names journal records, and the run's own question is never among them.
        assert all(seq in journal for seq in seqs)
        question = SessionMessage.objects.get(run=run, kind="user_input").seq
        assert question not in seqs
        assert item["summary"].startswith("[handoff summary]")
        # New runs compact under version 2: the row counts what the summary kept.
        counts = item["identifiers"]
        assert counts["found"] >= counts["kept"] and counts["found"] >= counts["added"]


def test_format_1_checkpoints_resume_and_replay_after_the_legacy_conversion(
    alice, gateway, make_demo_session
):
    from tests.support.legacy_encryption import store_everything_as_legacy

    session = make_demo_session(context_window=9_000)
    runs = []
    for n in range(3):
        runs.append(ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}'))
        if n == 1:
            # Before the runs after it read its rows, as they were: without local seqs.
            _as_format_1(runs[-1])
    failing = ask(session, alice, "NONCE-FAILING [boom]")
    _as_format_1(failing)
    before = full_checkpoint(Run.objects.get(pk=failing.pk))
    # The database as django-cryptography left it: pickled values signed with SECRET_KEY.
    store_everything_as_legacy()
    call_command("convert_legacy_encryption")
    for run in runs:
        report = replay_run(Run.objects.get(pk=run.pk))
        assert report.ok, "\n".join(report.differences)
    assert Run.objects.get(pk=runs[1].pk).checkpoint["format"] == 1

    run_resume(user=alice, run=failing)
    Run.objects.filter(pk=failing.pk).update(question="NONCE-FAILING")
    run_execute(run_id=failing.pk)
    failing.refresh_from_db()
    assert failing.status == Run.Status.SUCCEEDED and failing.checkpoint["format"] == 2
    after = full_checkpoint(failing)
    assert after["messages"][: len(before["messages"])] == before["messages"]
