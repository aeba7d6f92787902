"""What one run costs the database: its statements, and the writes that carry its signals.

A two-call run (a tool call, then the answer) makes at most `STATEMENTS_PER_RUN` statements:
the run's writes return whether it was asked to cancel or sent a supplement, its queue is read
only when it grew and closed by the renewal after the answer that ends the run, its connection
is read with the run, and its model calls are recorded by the saves after them, referring to the
journaled answer instead of copying it. A session's first run reads no
history (nothing was journaled before its question). Each save that records calls adds
them to the spend record in one more statement (`USAGE_UPSERTS`: the usage day upsert, in the
same transaction), the run's end riding on the last; each save that journals records writes
their search index rows in one more (`INDEX_INSERTS`, in the same transaction).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from django.db import connection
from django.db.models import BinaryField, F
from django.db.models.functions import Cast
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentloom.errors import Conflict
from context_app.engine_adapter import version_connection
from context_app.models import AgentVersion
from sessions_app.models import ModelCall, Run, RunSupplement, SessionMessage
from sessions_app.selectors.runs import call_responses
from sessions_app.services.execution import _ends_the_run, run_execute
from sessions_app.services.journal import JournalWriter, renew_lease, update_returning_signals
from sessions_app.services.renewer import RunLease, RunLeases
from sessions_app.services.runs import run_ask, run_cancel, run_claim, supplement_add
from tests.factories import ask, make_connection

# The run's own statements, the spend record's upserts (one per save that records a call) and
# the search index's inserts (one per save that journals records: question, call, result,
# answer).
RUN_STATEMENTS = 19
USAGE_UPSERTS = 2
INDEX_INSERTS = 4
STATEMENTS_PER_RUN = RUN_STATEMENTS + USAGE_UPSERTS + INDEX_INSERTS
TWO_CALLS = '/tool echo {"text": "NONCE-7"}'
# Savepoints stand for the test's own transaction; the live channel's rows are the deltas'
# (a Redis channel writes none to the database).
NOT_COUNTED = re.compile(
    r'\s*(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT)|.*"?sessions_app_rundelta"?\s'
)


def stored_bytes(column: str) -> Cast:
    """Return the expression of a stored column's bytes, read without decrypting them."""
    return Cast(column, output_field=BinaryField())


def _statements(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if not NOT_COUNTED.match(q["sql"])]


def test_a_two_call_run_makes_at_most_25_statements(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question=TWO_CALLS)
    with CaptureQueriesContext(connection) as queries:
        assert run_execute(run_id=run.pk) == "succeeded"
    statements = _statements(queries)
    assert len(statements) <= STATEMENTS_PER_RUN, "\n".join(s[:120] for s in statements)
    # The connection is read once; nobody polls the cancel flag or an empty supplement queue.
    assert sum("models_app_modelconnection" in s for s in statements) == 1
    assert not any("sessions_app_runsupplement" in s for s in statements)
    assert not any(re.match(r"\s*SELECT.*WHERE.*cancel_requested", s) for s in statements)
    assert sum("sessions_app_usageday" in s for s in statements) == USAGE_UPSERTS
    assert sum("sessions_app_journalterms" in s for s in statements) == INDEX_INSERTS
    assert not any(
        re.match(r"\s*SELECT.*sessions_app_(sessionview|projectionpoint)", s, re.S)
        for s in statements
    )


def test_an_answer_the_journal_holds_is_referred_to_not_copied(alice, gateway, make_demo_session):
    run = ask(make_demo_session(), alice, TWO_CALLS)
    calls = list(ModelCall.objects.filter(run=run).order_by("id"))
    answers = SessionMessage.objects.filter(run=run, kind="assistant").order_by("seq")
    assert [call.response_seq for call in calls] == [row.seq for row in answers]
    assert all("message" not in call.response for call in calls)
    # Read back, each call's response is what the gateway answered.
    replies = [reply.to_dict() for _request, reply in gateway.exchanges("action")]
    assert call_responses(calls) == replies


def test_a_save_returns_a_cancel_request(alice, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    assert run_claim(run_id=run.pk, owner="worker-1")
    writer = JournalWriter(Run.objects.get(pk=run.pk), lease_owner="worker-1")
    assert writer.renew().cancel_requested is False
    run_cancel(user=alice, run=run)
    assert writer.renew().cancel_requested is True
    assert writer.signals.cancel_requested is True


def test_a_run_write_stores_each_value_as_its_field_does(alice, make_demo_session):
    run = run_ask(user=alice, session=make_demo_session(), question="q")
    assert run_claim(run_id=run.pk, owner="worker-1")
    finished = timezone.now()
    values = {
        "checkpoint": {"frame": {"NONCE-CHECKPOINT": [1, "ü"]}},
        "counters": {"model_steps": 2},
        "answer": "NONCE-ANSWER",
        "pending_approvals": [{"id": "c1"}],
        "finished_at": finished,
    }
    assert update_returning_signals(run.pk, "worker-2", **values) is None, "fenced by the owner"
    assert Run.objects.get(pk=run.pk).answer is None
    signals = update_returning_signals(run.pk, "worker-1", **values)
    assert signals is not None and signals.cancel_requested is False
    stored = Run.objects.get(pk=run.pk)
    assert {name: getattr(stored, name) for name in values} == values
    # Encrypted at rest, as a queryset's update stores them.
    raw = Run.objects.filter(pk=run.pk).values_list(stored_bytes("checkpoint"), flat=True)
    assert b"NONCE-CHECKPOINT" not in bytes(raw.get())
    with pytest.raises(TypeError, match="attempt"):
        update_returning_signals(run.pk, "worker-1", attempt=F("attempt") + 1)


def test_the_heartbeat_hands_a_cancel_request_to_its_run(alice, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    assert run_claim(run_id=run.pk, owner="worker-1")
    run_cancel(user=alice, run=run)
    seen = []
    lease = RunLease(run_id=run.pk, owner="worker-1", on_signals=seen.append)
    assert RunLeases().renew(lease) is True
    assert [signals.cancel_requested for signals in seen] == [True]


def test_a_supplement_sent_during_a_model_call_enters_the_run(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question=TWO_CALLS)
    gateway.during_call.append(
        lambda: supplement_add(user=alice, run=Run.objects.get(pk=run.pk), text="NONCE-SUPP")
    )
    assert run_execute(run_id=run.pk) == "succeeded"
    supplement = RunSupplement.objects.get(run=run)
    assert supplement.consumed_at is not None, "the view took it, not the run's ending"
    requests = [str(request.messages) for request in gateway.action_requests()]
    assert "NONCE-SUPP" not in requests[0] and "NONCE-SUPP" in requests[1]


def test_a_supplement_sent_during_the_final_call_is_answered_and_the_queue_stays_open(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    refused = []

    def send(text: str) -> None:
        try:
            supplement_add(user=alice, run=Run.objects.get(pk=run.pk), text=text)
        except Conflict:
            refused.append(text)

    # The answer would end the run, but a supplement came during its call: the renewal after it
    # leaves the queue open, the run takes it, and one sent during the next call is taken too.
    gateway.during_call.append(lambda: send("NONCE-FIRST"))
    gateway.during_call.append(lambda: gateway.during_call.append(lambda: send("NONCE-SECOND")))
    assert run_execute(run_id=run.pk) == "succeeded"
    assert refused == []
    requests = [str(request.messages) for request in gateway.action_requests()]
    assert len(requests) == 3
    assert "NONCE-FIRST" in requests[1] and "NONCE-SECOND" in requests[2]
    assert all(item.consumed_at for item in RunSupplement.objects.filter(run=run))
    assert Run.objects.get(pk=run.pk).supplements_closed is True


def test_the_renewal_closes_the_queue_only_when_nothing_came_after_the_count_and_no_cancel(
    alice, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    assert run_claim(run_id=run.pk, owner="worker-1")
    supplement_add(user=alice, run=run, text="NONCE-QUEUED")
    signals = renew_lease(run_id=run.pk, owner="worker-1", close_queue_upto=0)
    assert signals is not None and signals.supplements_closed is False
    assert Run.objects.get(pk=run.pk).supplements_closed is False, "one came after the count"
    signals = renew_lease(run_id=run.pk, owner="worker-1", close_queue_upto=1)
    assert signals is not None and signals.supplements_closed is True
    with pytest.raises(Conflict):
        supplement_add(user=alice, run=run, text="NONCE-LATE")

    cancelled = run_ask(user=alice, session=make_demo_session(), question="q")
    assert run_claim(run_id=cancelled.pk, owner="worker-1")
    run_cancel(user=alice, run=cancelled)
    signals = renew_lease(run_id=cancelled.pk, owner="worker-1", close_queue_upto=0)
    assert signals is not None and signals.cancel_requested is True
    assert signals.supplements_closed is False, "a cancelled run journals what comes after"


ANSWER = {"message": {"role": "assistant", "content": "done"}}
TOOL_CALL = {
    "message": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": {"name": "echo", "arguments": "{}"}}],
    }
}


@pytest.mark.parametrize(
    ("purpose", "instance", "response", "error", "verifies", "ends"),
    [
        ("action", "main", ANSWER, None, False, True),
        ("action", "main", TOOL_CALL, None, False, False),
        ("action", "main", ANSWER, None, True, False),  # a verification call follows
        ("action", "1.1", ANSWER, None, False, False),  # a sub-agent's answer
        ("compaction", "main", ANSWER, None, False, False),
        ("action", "main", None, "upstream: failed", False, False),
    ],
)
def test_only_the_main_instances_unverified_answer_closes_the_queue(
    purpose, instance, response, error, verifies, ends
):
    # The fields of the engine's report of a call that the decision reads.
    call = SimpleNamespace(purpose=purpose, instance=instance, response=response, error=error)
    assert _ends_the_run(call, verifies) is ends


def test_a_run_reads_the_connection_its_snapshot_names(alice, make_demo_session):
    session = make_demo_session()
    version = session.agent_version
    other = make_connection(session.space, name="other")
    # A version row whose key names another connection than its snapshot (none is published
    # so): the snapshot wins, even when the version was read with its key's row.
    odd = AgentVersion.objects.create(
        agent=version.agent, number=99, snapshot=version.snapshot, model_connection=other
    )
    loaded = AgentVersion.objects.select_related("model_connection").get(pk=odd.pk)
    assert version_connection(loaded).pk == version.model_connection_id
    loaded = AgentVersion.objects.select_related("model_connection").get(pk=version.pk)
    with CaptureQueriesContext(connection) as queries:
        assert version_connection(loaded).pk == version.model_connection_id
    assert len(queries.captured_queries) == 0, "read with the version"


def test_a_supplement_queued_before_the_run_starts_is_taken(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    supplement_add(user=alice, run=run, text="NONCE-EARLY")
    assert run_execute(run_id=run.pk) == "succeeded"
    assert "NONCE-EARLY" in str(gateway.action_requests()[0].messages)


def test_a_run_older_than_the_supplement_count_still_reads_its_queue(
    alice, gateway, make_demo_session
):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question="q")
    RunSupplement.objects.create(run=run, position=1, text="NONCE-OLD")
    Run.objects.filter(pk=run.pk).update(supplements_added=None)
    assert run_execute(run_id=run.pk) == "succeeded"
    assert "NONCE-OLD" in str(gateway.action_requests()[0].messages)


def test_a_call_whose_save_fails_is_recorded_whole_and_discarded(alice, gateway, make_demo_session):
    session = make_demo_session()
    run = run_ask(user=alice, session=session, question=TWO_CALLS)
    # The lease is lost while the model answers: the save after the call never commits.
    gateway.during_call.append(
        lambda: Run.objects.filter(pk=run.pk).update(lease_owner="another-worker")
    )
    assert run_execute(run_id=run.pk) == "lease lost"
    call = ModelCall.objects.get(run=run)
    assert call.discarded is True
    assert call.response_seq is None and call.response["message"]["tool_calls"]


def test_refer_model_calls_converts_copies_and_keeps_what_the_journal_lacks(
    alice, gateway, make_demo_session, capsys
):
    from django.core.management import call_command

    run = ask(make_demo_session(), alice, TWO_CALLS)
    calls = list(ModelCall.objects.filter(run=run).order_by("id"))
    whole = call_responses(calls)
    # As recorded before calls referred to the journal: a copy of each answer.
    for call, response in zip(calls, whole, strict=True):
        ModelCall.objects.filter(pk=call.pk).update(response=response, response_seq=None)
    failed = ModelCall.objects.create(run=run, purpose="action", response={"message": {}})

    call_command("refer_model_calls", batch=1)
    assert "referred 2 model call(s) of 3" in capsys.readouterr().out
    calls = list(ModelCall.objects.filter(run=run).exclude(pk=failed.pk).order_by("id"))
    assert all(call.response_seq and "message" not in call.response for call in calls)
    assert call_responses(calls) == whole
    assert ModelCall.objects.get(pk=failed.pk).response == {"message": {}}
    call_command("refer_model_calls")
    assert "referred 0 model call(s) of 1" in capsys.readouterr().out
