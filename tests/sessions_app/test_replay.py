"""`manage.py replay`: a session's next history, and runs re-driven from their recordings."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.selectors.runs import call_responses
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.runs import run_ask, run_resume, supplement_add
from tests.factories import ask

pytestmark = pytest.mark.django_db


def _replay(run) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("replay", run=run.pk, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue() + str(error)
    return 0, out.getvalue()


@pytest.fixture
def rich_session(alice, gateway, make_demo_session):
    """A session whose runs use tools, supplements, compaction, delegation and a resume."""
    session = make_demo_session(
        policy={"model_steps": 2},
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}
        ],
    )
    ask(session, alice, '/tool echo {"text": "NONCE-1"} /tool calculator {"expression": "2*21"}')
    with_supplement = run_ask(user=alice, session=session, question='/tool echo {"text": "two"}')
    supplement_add(user=alice, run=with_supplement, text="NONCE-SUPPLEMENT")
    run_execute(run_id=with_supplement.pk)
    ask(session, alice, '/tool delegate_helper {"task": "/tool echo {\\"text\\": \\"kid\\"}"}')
    ask(session, alice, '/tool fail {"message": "NONCE-FAIL"}')
    resumed = ask(session, alice, "NONCE-RESUME [boom]")
    assert resumed.status == "failed"
    run_resume(user=alice, run=resumed)
    supplement_add(user=alice, run=Run.objects.get(pk=resumed.pk), text="carry on")
    run_execute(run_id=resumed.pk)
    assert Run.objects.get(pk=resumed.pk).status == "succeeded"
    return session


def test_every_run_of_a_rich_session_replays_exactly(rich_session):
    runs = list(Run.objects.filter(session=rich_session).order_by("number"))
    assert any(r.checkpoint["context"]["compactions"] for r in runs), "some run compacted"
    assert SessionMessage.objects.filter(session=rich_session, instance__contains=".").exists()
    for run in runs:
        code, output = _replay(run)
        assert code == 0, output
        assert "records and views match" in output


def test_an_altered_model_response_is_detected(rich_session):
    run = Run.objects.filter(session=rich_session).order_by("number").first()
    call = ModelCall.objects.filter(run=run, purpose="action").order_by("id").last()
    response = call_responses([call])[0]
    response["message"] = {**response["message"], "content": "something else entirely"}
    ModelCall.objects.filter(pk=call.pk).update(response=response, response_seq=None)
    code, output = _replay(run)
    assert code == 1
    assert "something else entirely" in output and "difference" in output


def test_an_altered_journal_row_is_detected(rich_session):
    run = Run.objects.filter(session=rich_session).order_by("number")[1]
    row = SessionMessage.objects.filter(run=run, kind="supplement").get()
    SessionMessage.objects.filter(pk=row.pk).update(
        message={"role": "user", "content": "NONCE-TAMPERED"}
    )
    report = replay_run(run)
    assert not report.ok
    assert any("NONCE-TAMPERED" in d for d in report.differences)


def test_replay_session_prints_the_next_history(rich_session):
    out = StringIO()
    call_command("replay", session=rich_session.pk, stdout=out)
    text = out.getvalue()
    assert "watermark" in text and "records appended after seq" in text
    assert "counters: user_turns=" in text
