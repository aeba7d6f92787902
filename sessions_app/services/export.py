"""Exporting a session: its creator's, or an operator's with an audit row.

Session content belongs to the session's creator: only they export it, through the
console or the API; an operator exports any session only with `manage.py export_session --by`
(a superuser), and every export, theirs or the creator's, writes a `SessionExport` row. Two
formats:

- `jsonl`: the whole session in the transfer format (`services.transfer`), signed. It is a
  generator of lines read in batches of `EXPORT_BATCH` rows, so a session of any length is
  written in bounded memory (the web answers it as a streaming response);
- `openai`: the main instance's conversation as OpenAI chat messages (a JSON array), projected
  as a new run would inherit it (tool groups closed, late results as notes), every tool result
  whole, for use elsewhere; unsigned, and not importable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentloom import __version__
from agentloom.engine import project_history
from agentloom.errors import NotFound, PermissionDenied
from context_app.engine_adapter import pinned_prompt
from sessions_app.models import (
    JournalReference,
    ModelCall,
    Run,
    Session,
    SessionExport,
    SessionMessage,
    SessionView,
)
from sessions_app.selectors.context import run_compactions
from sessions_app.selectors.history import main_records_after
from sessions_app.selectors.runs import call_responses
from sessions_app.selectors.stored_messages import messages_read
from sessions_app.services.transfer import (
    FORMAT,
    FORMAT_VERSION,
    Signer,
    dump_line,
    without_secrets,
)

EXPORT_FORMATS = ("jsonl", "openai")
# Rows read from the database at a time: what bounds an export's memory.
EXPORT_BATCH = 500
# A tool result is exported whole in the OpenAI format (the view's cap is for the model).
_WHOLE = 1 << 40

RECORD_FIELDS = (
    "seq",
    "run__number",
    "instance",
    "kind",
    "entry_key",
    "local_seq",
    "message",
    "created_at",
    "origin_seq",
)
RUN_FIELDS = (
    "number",
    "status",
    "question",
    "answer",
    "error",
    "attempt",
    "counters",
    "inherited_watermark",
    "created_at",
    "started_at",
    "finished_at",
)


@transaction.atomic(durable=True)
def export_record(*, user, session: Session, format: str, by_operator: bool) -> SessionExport:
    """Write the audit row of an export (committed before the first line is sent)."""
    return SessionExport.objects.create(
        session_number=session.pk,
        space_id=session.space_id,
        exported_by=user,
        exported_by_username=user.get_username(),
        format=format,
        by_operator=by_operator,
    )


def session_export(
    *, user, session: Session, format: str = "jsonl", bodies: bool = False
) -> Iterator[bytes]:
    """Return the export of `session` by its creator as an iterator of byte lines (audited).

    NotFound for anyone but the creator (the selectors already hide the session from them).
    """
    if session.created_by_id != user.pk or session.deleted_at is not None:
        raise NotFound("Not found.")
    export_record(user=user, session=session, format=format, by_operator=False)
    return export_lines(session, format=format, exported_by=user.get_username(), bodies=bodies)


def session_export_by_operator(
    *, user, session_id: int, format: str = "jsonl", bodies: bool = False
) -> Iterator[bytes]:
    """Return an operator's export of any session that is not purged (a superuser's, audited)."""
    if not (user.is_active and user.is_superuser):
        raise PermissionDenied("Only a superuser may export another person's session.")
    session = Session.objects.filter(pk=session_id).first()
    if session is None:
        raise NotFound("Not found.")
    export_record(user=user, session=session, format=format, by_operator=True)
    return export_lines(session, format=format, exported_by=user.get_username(), bodies=bodies)


def export_lines(
    session: Session, *, format: str, exported_by: str, bodies: bool = False
) -> Iterator[bytes]:
    """Yield the file's lines; `jsonl` ends with its signature."""
    if format == "openai":
        yield from _openai_lines(session)
        return
    signer = Signer()
    for item in _items(session, exported_by=exported_by, bodies=bodies):
        line = dump_line(item)
        signer.update(line)
        yield line
    yield signer.signature_line()


def _items(session: Session, *, exported_by: str, bodies: bool) -> Iterator[dict[str, Any]]:
    yield _header(session, exported_by=exported_by, bodies=bodies)
    yield from journal_items(session)
    runs = Run.objects.filter(session=session).order_by("number")
    for run in runs.iterator(chunk_size=EXPORT_BATCH):
        yield {"type": "run", **{name: getattr(run, name) for name in RUN_FIELDS}}
        for item in run_compactions(run):
            yield {"type": "compaction", "run": run.number, **item}
    yield from _references(session)
    yield from _views(session)
    yield from _model_calls(session, bodies=bodies)


def _header(session: Session, *, exported_by: str, bodies: bool) -> dict[str, Any]:
    version = session.agent_version
    return {
        "type": "header",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "agentloom": __version__,
        "session": {
            "id": session.pk,
            "title": session.title,
            "created_at": session.created_at,
            "origin": session.origin,
            "agent": {"id": session.agent_id, "name": session.agent.name},
            "agent_version": {
                "id": version.pk,
                "number": version.number,
                "snapshot": without_secrets(version.snapshot),
            },
        },
        "exported_by": exported_by,
        "exported_at": timezone.now(),
        "records": SessionMessage.objects.filter(session=session).count(),
        "bodies": bodies,
    }


def journal_items(session: Session) -> Iterator[dict[str, Any]]:
    """Yield the session's journal records in seq order, `EXPORT_BATCH` rows at a time."""
    rows = SessionMessage.objects.filter(session=session).order_by("seq")
    for values in rows.values_list(*RECORD_FIELDS).iterator(chunk_size=EXPORT_BATCH):
        item = {"type": "record", **dict(zip(RECORD_FIELDS, values, strict=True))}
        item["run"] = item.pop("run__number")
        if item["origin_seq"] is None:
            del item["origin_seq"]
        yield item


def _references(session: Session) -> Iterator[dict[str, Any]]:
    rows = (
        JournalReference.objects.filter(message__session=session)
        .order_by("pk")
        .values_list(
            "run__number", "snapshot_revision", "view__revision", "message__seq", "last__seq"
        )
    )
    for run, revision, view, first, last in rows.iterator(chunk_size=EXPORT_BATCH):
        yield {
            "type": "reference",
            "run": run,
            "snapshot_revision": revision,
            "view": view,
            "from_seq": first,
            "to_seq": first if last is None else last,
        }


def _views(session: Session) -> Iterator[dict[str, Any]]:
    views = SessionView.objects.filter(session=session).select_related("run", "derived_from")
    for view in views.order_by("revision").iterator(chunk_size=50):
        yield {
            "type": "view",
            "revision": view.revision,
            "watermark": view.watermark,
            "run": view.run.number,
            "snapshot_revision": view.snapshot_revision,
            "entries": view.entries,
            "messages": messages_read(session.pk, view.messages),
            "binding": view.binding,
            "user_turns": view.user_turns,
            "model_steps": view.model_steps,
            "baseline_user_turns": view.baseline_user_turns,
            "baseline_model_steps": view.baseline_model_steps,
            "derived_from": view.derived_from.revision if view.derived_from else None,
            "revoked": view.revoked_at is not None,
            "created_at": view.created_at,
        }


def _model_calls(session: Session, *, bodies: bool) -> Iterator[dict[str, Any]]:
    calls = ModelCall.objects.filter(run__session=session).select_related("run").order_by("pk")
    if not bodies:
        calls = calls.defer("response")
    batch: list[ModelCall] = []
    for call in calls.iterator(chunk_size=EXPORT_BATCH):
        batch.append(call)
        if len(batch) == EXPORT_BATCH:
            yield from _call_items(batch, bodies=bodies)
            batch = []
    yield from _call_items(batch, bodies=bodies)


def _call_items(calls: list[ModelCall], *, bodies: bool) -> Iterator[dict[str, Any]]:
    responses = call_responses(calls) if bodies else [None] * len(calls)
    for call, response in zip(calls, responses, strict=True):
        cost = call.cost
        item = {
            "type": "model_call",
            "run": call.run.number,
            "instance": call.instance,
            "purpose": call.purpose,
            "request_estimate": call.request_estimate,
            "estimator": call.estimator,
            "reported_prompt_tokens": call.reported_prompt_tokens,
            "cached_tokens": call.cached_tokens,
            "reported_completion_tokens": call.reported_completion_tokens,
            "usage": call.usage,
            "latency_ms": call.latency_ms,
            "error": call.error,
            "discarded": call.discarded,
            "cost": None
            if cost is None
            else {"amount": str(cost), "currency": call.price_currency},
            "created_at": call.created_at,
        }
        if bodies:
            item["response"] = response
        yield item


def _openai_lines(session: Session) -> Iterator[bytes]:
    history = project_history(main_records_after(session, 0), tool_result_chars=_WHOLE)
    # The system prompt a run asked now starts with: the version's, then the session's pins.
    system = pinned_prompt(session.agent_version.snapshot, session.pinned)
    messages = [{"role": "system", "content": system}] if system else []
    messages += history.messages
    yield b"[\n"
    for index, message in enumerate(messages):
        tail = b",\n" if index < len(messages) - 1 else b"\n"
        yield json.dumps(message, ensure_ascii=False).encode() + tail
    yield b"]\n"
