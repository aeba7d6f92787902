"""Runs: asking, resuming, cancelling and supplements, answered at once with 202."""

from __future__ import annotations

import pytest

from sessions_app.models import Run, RunSupplement
from tests.api.factories import ask, compacted_frame, finish

pytestmark = pytest.mark.django_db

RUN_FIELDS = {
    "id",
    "session",
    "number",
    "status",
    "question",
    "answer",
    "error",
    "cancel_requested",
    "model_call_in_flight",
    "pending_approvals",
    "pending_questions",
    "attempt",
    "trace_id",
    "counters",
    "created_at",
    "started_at",
    "finished_at",
    "cost",
}
ZEROS = {"user_turns": 0, "model_steps": 0, "baseline_user_turns": 0, "baseline_model_steps": 0}


def _runs_url(session):
    return f"/api/v1/sessions/{session.pk}/runs"


# --- asking ------------------------------------------------------------------------------------


def test_ask_answers_202_with_the_queued_run(
    api, session, queued_runs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(_runs_url(session), {"question": "  What is 6*7?  "}, "json")
    assert response.status_code == 202
    body = response.json()
    assert set(body) == RUN_FIELDS
    assert body["session"] == session.pk
    assert (body["number"], body["status"], body["attempt"]) == (1, "queued", 1)
    assert (body["question"], body["answer"], body["error"]) == ("What is 6*7?", None, "")
    assert body["counters"] == ZEROS
    assert body["started_at"] is None and body["finished_at"] is None
    assert queued_runs == [body["id"]]


# What asking takes, past the token and the session: the spend limits, the version and its
# connection (read once for the redaction and the door), the tool servers' headers, the lease
# sweep, the session locked and read at once, the active-run check, the next number, the run.
ASK_STATEMENTS = 9


def test_asking_reads_the_connection_and_the_locked_session_once(
    api, session, queued_runs, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    finish(ask(session, session.created_by), "succeeded")  # titled: no title written
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = api.post(_runs_url(session), {"question": "What is 6*7?"}, "json")
    assert response.status_code == 202 and response.json()["cost"] is None
    statements = [
        query["sql"]
        for query in queries.captured_queries
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]
    # The token and the session (the view's), then the ask itself.
    assert len(statements) - 2 <= ASK_STATEMENTS, "\n".join(statements)
    connection_reads = [sql for sql in statements if '"models_app_modelconnection"' in sql]
    assert len(connection_reads) == 1, connection_reads


@pytest.mark.parametrize("status", ["queued", "running"])
def test_ask_while_a_run_is_active_is_409(api, run, status):
    Run.objects.filter(pk=run.pk).update(status=status)
    response = api.post(_runs_url(run.session), {"question": "Another?"}, "json")
    assert response.status_code == 409
    assert "still active" in response.json()["detail"]
    assert Run.objects.filter(session=run.session).count() == 1


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_ask_after_a_finished_run_numbers_the_next(api, run, status):
    finish(run, status)
    response = api.post(_runs_url(run.session), {"question": "Next?"}, "json")
    assert response.status_code == 202
    assert response.json()["number"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "question"),
        ({"question": ""}, "question"),
        ({"question": "   "}, "question"),
        ({"question": None}, "question"),
        ({"question": 42}, "question"),
        ({"question": ["a"]}, "question"),
        ({"question": "x" * 100_001}, "question"),
        ({"question": "ok", "model": "gpt"}, "model"),
    ],
)
def test_ask_refuses_bad_input(api, session, body, field):
    response = api.post(_runs_url(session), body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
    assert not Run.objects.exists()


def test_runs_are_listed_newest_first(api, session, alice):
    for _ in range(3):
        finish(ask(session, alice), "succeeded")
    page = api.get(_runs_url(session)).json()
    assert page["count"] == 3
    assert [r["number"] for r in page["results"]] == [3, 2, 1]
    assert [
        r["number"] for r in api.get(_runs_url(session) + "?limit=1&offset=1").json()["results"]
    ] == [2]


def test_the_run_object(api, run):
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert set(body) == RUN_FIELDS
    assert (body["id"], body["status"], body["counters"]) == (run.pk, "queued", ZEROS)


def test_counters_come_from_the_last_save(api, run):
    # The journal sync copies the checkpoint's counters into the run row at every save.
    run.checkpoint = compacted_frame()
    run.counters = run.checkpoint["context"]["counters"]
    run.save()
    counters = api.get(f"/api/v1/runs/{run.pk}/").json()["counters"]
    assert counters == run.checkpoint["context"]["counters"]
    assert counters["model_steps"] == 16
    assert counters["baseline_model_steps"] == 8


# --- resume ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_resume_requeues_a_failed_or_cancelled_run(
    api, run, status, queued_runs, django_capture_on_commit_callbacks
):
    finish(run, status, error="worker_lost")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 202
    body = response.json()
    assert (body["id"], body["status"], body["attempt"], body["error"]) == (
        run.pk,
        "queued",
        2,
        "",
    )
    assert body["finished_at"] is None
    assert queued_runs == [run.pk]


@pytest.mark.parametrize("status", ["queued", "running", "succeeded"])
def test_resume_is_409_unless_failed_or_cancelled(api, run, status):
    Run.objects.filter(pk=run.pk).update(status=status)
    response = api.post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 409
    run.refresh_from_db()
    assert (run.status, run.attempt) == (status, 1)


def test_resume_is_409_while_another_run_is_active(api, run, alice):
    finish(run, "failed")
    ask(run.session, alice)
    response = api.post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 409
    assert "Another run" in response.json()["detail"]


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_a_queued_run_at_once(api, run):
    response = api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "cancelled"
    assert body["finished_at"] is not None


def test_cancel_a_running_run_at_its_next_safe_point(api, run):
    Run.objects.filter(pk=run.pk).update(status="running")
    response = api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "running"
    run.refresh_from_db()
    assert run.cancel_requested


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_cancel_a_finished_run_is_409(api, run, status):
    finish(run, status)
    response = api.post(f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 409
    assert "already finished" in response.json()["detail"]


# --- supplements -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["queued", "running", "failed", "cancelled"])
def test_supplements_are_queued_in_order(api, run, status):
    Run.objects.filter(pk=run.pk).update(status=status)
    first = api.post(f"/api/v1/runs/{run.pk}/supplements", {"text": "Also X."}, "json")
    second = api.post(f"/api/v1/runs/{run.pk}/supplements/", {"text": "And Y."}, "json")
    assert (first.status_code, second.status_code) == (202, 202)
    assert set(first.json()) == {"id", "position"}
    assert (first.json()["position"], second.json()["position"]) == (1, 2)
    texts = list(RunSupplement.objects.filter(run=run).values_list("text", flat=True))
    assert texts == ["Also X.", "And Y."]


def test_supplement_once_succeeded_is_409(api, run):
    finish(run, "succeeded")
    response = api.post(f"/api/v1/runs/{run.pk}/supplements", {"text": "Late."}, "json")
    assert response.status_code == 409
    assert not RunSupplement.objects.exists()


def test_supplement_after_the_final_drain_is_409(api, run):
    Run.objects.filter(pk=run.pk).update(status="running", supplements_closed=True)
    response = api.post(f"/api/v1/runs/{run.pk}/supplements", {"text": "Late."}, "json")
    assert response.status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": " "}, "text"),
        ({"text": 1}, "text"),
        ({"text": "x" * 20_001}, "text"),
        ({"text": "ok", "position": 1}, "position"),
    ],
)
def test_supplement_refuses_bad_input(api, run, body, field):
    response = api.post(f"/api/v1/runs/{run.pk}/supplements", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [field]
