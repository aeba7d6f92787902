"""A session journaled directly, turn after turn of the peer workload, without running a model.

Each turn is a run of five records: the question, a tool call, a 2,000-character tool result, a
300-character answer and the run's status — what a page of the journal reads back.
"""

from __future__ import annotations

TOOL_RESULT_CHARS = 2_000
ANSWER_CHARS = 300
RECORDS_PER_TURN = 5


def journaled_session(user, turns: int, *, session=None):
    """Return a session of `user` (a new one, or `session`) with `turns` more turns journaled."""
    from django.db import transaction
    from django.utils import timezone

    from sessions_app.models import Run, SessionMessage
    from sessions_app.services.journal import append_records
    from tests.factories import make_agent, make_connection, make_session, make_space, make_version

    if session is None:
        space = make_space(admin=user)
        agent = make_agent(space, user, connection=make_connection(space))
        session = make_session(make_version(agent), user)
    tool_result = ("result line with some figures 12345 and words. " * 60)[:TOOL_RESULT_CHARS]
    answer = ("The answer, citing the tool's result in a few sentences. " * 10)[:ANSWER_CHARS]
    kind = SessionMessage.Kind
    first = session.runs.count() + 1
    for number in range(first, first + turns):
        call = f"call_{number}"
        tool_call = {
            "id": call,
            "type": "function",
            "function": {"name": "echo", "arguments": '{"text": "look it up"}'},
        }
        records = [
            (kind.USER_INPUT, {"role": "user", "content": f"question {number}"}),
            (kind.ASSISTANT, {"role": "assistant", "content": None, "tool_calls": [tool_call]}),
            (kind.TOOL_RESULT, {"role": "tool", "tool_call_id": call, "content": tool_result}),
            (kind.ASSISTANT, {"role": "assistant", "content": answer}),
            (kind.STATUS, {"status": "succeeded", "error": None}),
        ]
        with transaction.atomic():
            run = Run.objects.create(
                session=session, number=number, status="succeeded", question=f"question {number}"
            )
            append_records(
                run_id=run.pk,
                session_id=session.pk,
                records=[
                    ("main", record_kind, f"r{index}", message, timezone.now(), None)
                    for index, (record_kind, message) in enumerate(records)
                ],
                known=set(),
            )
    session.refresh_from_db()
    return session
