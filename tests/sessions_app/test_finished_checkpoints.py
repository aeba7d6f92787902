"""A run that succeeded keeps only the checkpoint its readers read (`finished_checkpoint`).

It is never resumed, so the state only a resume reads is left out, and its compaction log rows
leave out the sources their stored snapshots hold. Every reader of an ended run reads the slim
form as it read the whole one: the Context page, the chat's marks, replay, a new run's history
with the masks of earlier runs, a fork and an export imported again. A failed run, which may be
resumed, keeps its whole checkpoint and resumes.
"""

from __future__ import annotations

import io

import pytest
from django.db import connection

from agentloom import encryption
from context_app.engine_adapter import version_binding
from sessions_app.models import Run
from sessions_app.selectors.checkpoints import run_checkpoint
from sessions_app.selectors.context import compaction_marks, run_compactions, run_context
from sessions_app.selectors.history import history_for_new_run
from sessions_app.services import journal
from sessions_app.services.execution import run_execute
from sessions_app.services.export import session_export
from sessions_app.services.fork import session_fork
from sessions_app.services.imports import session_import
from sessions_app.services.journal import RESUME_ONLY_STATE, finished_checkpoint
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_resume
from tests.factories import ask
from tests.sessions_app.conftest import long_question

pytestmark = pytest.mark.django_db


def _tool(n: int) -> str:
    return f'/tool big_output {{"chars": 1500}} NONCE-{n}'


@pytest.fixture
def whole_forms(monkeypatch):
    """The checkpoint each succeeded run would have stored whole, in the order they ended."""
    kept: list[dict] = []

    def spy(stored, frame):
        kept.append(stored)
        return finished_checkpoint(stored, frame)

    monkeypatch.setattr(journal, "finished_checkpoint", spy)
    return kept


@pytest.fixture
def compacting(alice, gateway, make_demo_session, whole_forms):
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, _tool(n)) for n in range(4)]
    runs += [ask(session, alice, long_question(n)) for n in range(4, 7)]
    assert all(run.status == Run.Status.SUCCEEDED for run in runs)
    assert len(whole_forms) == len(runs)
    return session, dict(zip([run.pk for run in runs], whole_forms, strict=True))


def _stored_bytes(run: Run) -> tuple[bytes, dict]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT checkpoint FROM sessions_app_run WHERE id = %s", [run.pk])
        token = bytes(cursor.fetchone()[0])
    return token, encryption.decrypt_sized(token)[0]


def _readings(session, run: Run) -> dict:
    run = Run.objects.get(pk=run.pk)
    return {
        "context": run_context(run, costs=True),
        "compactions": run_compactions(run),
        "marks": compaction_marks(run),
        "history": history_for_new_run(session, version_binding(session.agent_version)),
    }


def test_a_succeeded_run_stores_only_what_its_readers_read(compacting):
    session, whole = compacting
    dropped_sources = 0
    for run in Run.objects.filter(session=session):
        token, stored = _stored_bytes(run)
        assert stored == run.checkpoint
        assert not set(stored["state"]) & RESUME_ONLY_STATE
        assert set(whole[run.pk]["state"]) & RESUME_ONLY_STATE
        for key in ("plan", "calibration", "compaction_log", "token_counts"):
            assert key in stored["state"]
        assert stored["view"] == whole[run.pk]["view"]
        assert stored["binding"] == whole[run.pk]["binding"]
        assert stored["context"] == whole[run.pk]["context"]
        # The candidate answer is the run's answer, stored once, and read back.
        assert "candidate_answer" not in stored["state"]
        assert whole[run.pk]["state"]["candidate_answer"] == run.answer
        assert run_checkpoint(run)["state"]["candidate_answer"] == run.answer
        assert len(token) < len(encryption.encrypt(whole[run.pk], compress=True))
        log = stored["state"]["compaction_log"]
        dropped_sources += sum(1 for row in log if row.get("revision") and "sources" not in row)
        # Read back, every row has the sources it was saved with.
        assert (
            run_checkpoint(run)["state"]["compaction_log"]
            == whole[run.pk]["state"]["compaction_log"]
        )
    assert dropped_sources, "some compaction's sources are read from its snapshot"


def test_every_reader_reads_the_slim_form_as_the_whole_one(compacting):
    session, whole = compacting
    runs = list(Run.objects.filter(session=session).order_by("number"))
    slim = {run.pk: _readings(session, run) for run in runs}
    assert any(reading["compactions"] for reading in slim.values())
    assert any(
        item["summarised_ranges"] for reading in slim.values() for item in reading["compactions"]
    )
    for run in runs:
        report = replay_run(run)
        assert report.ok, "\n".join(report.differences)
    for pk, checkpoint in whole.items():
        Run.objects.filter(pk=pk).update(checkpoint=checkpoint)
    for run in runs:
        assert _readings(session, run) == slim[run.pk]


def test_a_fork_and_an_import_of_slim_runs_go_on(alice, compacting):
    session, _whole = compacting
    last = session.messages.order_by("-seq")[0].seq
    fork = session_fork(user=alice, session=session, seq=last)
    assert ask(fork, alice, "NONCE-FORKED").status == Run.Status.SUCCEEDED
    data = b"".join(session_export(user=alice, session=session))
    imported = session_import(
        user=alice,
        space=session.space,
        stream=io.BytesIO(data),
        agent_version=session.agent_version,
    )
    assert b"".join(session_export(user=alice, session=imported)).count(b'"record"') == (
        data.count(b'"record"')
    )
    assert ask(imported, alice, "NONCE-IMPORTED").status == Run.Status.SUCCEEDED


def test_a_failed_run_keeps_its_whole_checkpoint_and_resumes(alice, gateway, make_demo_session):
    session = make_demo_session()
    ask(session, alice, '/tool echo {"text": "NONCE-1"}')
    failed = ask(session, alice, "NONCE-RESUME [boom]")
    assert failed.status == Run.Status.FAILED
    _token, stored = _stored_bytes(failed)
    assert set(stored["state"]) >= RESUME_ONLY_STATE
    assert stored["state"]["terminal"]["status"] == Run.Status.FAILED
    run_resume(user=alice, run=failed)
    run_execute(run_id=failed.pk)
    resumed = Run.objects.get(pk=failed.pk)
    assert resumed.status == Run.Status.SUCCEEDED and resumed.attempt == 2
    assert not set(resumed.checkpoint["state"]) & RESUME_ONLY_STATE
    report = replay_run(resumed)
    assert report.ok, "\n".join(report.differences)


def test_sources_are_left_out_only_where_the_snapshot_holds_the_same():
    snapshot = {"revision": 1, "sources": {"own": [[1, 2]], "session": []}}
    frame = {
        "context": {"compactions": [snapshot]},
        "state": {
            "compaction_log": [
                {"revision": 1, "sources": {"own": [[1, 3]], "session": []}},
                {"revision": None, "stage": "masking"},
            ]
        },
    }
    stored = {**frame, "context": {"compactions": [{"revision": 1, "stored": True}]}}
    assert finished_checkpoint(stored, frame)["state"] == frame["state"]
    same = {**frame["state"]["compaction_log"][0], "sources": snapshot["sources"]}
    frame["state"]["compaction_log"][0] = same
    slim = finished_checkpoint(stored, frame)
    assert slim["state"]["compaction_log"][0] == {"revision": 1}
    assert frame["state"]["compaction_log"][0] is same and "sources" in same
