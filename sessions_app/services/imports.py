"""Importing a session export into a space: checked whole, staged hidden, published at once.

The importer's new session is bound to an agent version of the space that they choose, or to
none (`read_only`: it is read, never run). A file is read twice: first checked whole — its size
against `SESSION_IMPORT_MAX_BYTES`, every line's JSON and type, the header's format and version,
seqs strictly increasing, the record count the header announced, and last the signature, which
only a key of this deployment makes — and refused whole, naming the line and the reason, before
anything is written. Then it is written into a staged session (hidden from every selector) in
batches of `IMPORT_BATCH` rows, a transaction each, so a large import never holds SQLite's one
writer for its whole length; the last step publishes it. Records keep their seqs, order, kinds
and messages (export → import → export gives the same records); runs come back finished, as
copies (`origin_number`), never resumed. Tools come only from the chosen version, so nothing
imported grants one; views are not imported (a new run projects the imported records). The
session's `origin` notes the last imported record (`upto`): from rendering 6 a run's history
follows the imported records with one note saying where they came from
(`selectors.history.imported_history`).

An import that stopped half-way (its process killed) leaves a staged session nobody sees:
`staged_discard` removes those older than `STAGED_MAX_AGE` (an import still writing is younger),
each with its runs and records in one transaction; the hourly `discard_stale_imports` task runs
it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentloom.errors import InvalidInput
from agentloom.spaces.selectors import require_member
from context_app.models import AgentVersion
from sessions_app.models import Run, Session, SessionMessage
from sessions_app.services.search_index import index_records
from sessions_app.services.transfer import FORMAT, FORMAT_VERSION, LINE_TYPES, Signer

IMPORT_BATCH = 500
# A staged session this old belongs to an import that stopped: it is discarded.
STAGED_MAX_AGE = timedelta(hours=6)
RECORD_KINDS = set(SessionMessage.Kind.values)


class ImportRefused(InvalidInput):
    """A file refused whole: the line and the reason."""

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}", field="file")
        self.line = line


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Yield (number, line) of the file, refusing it once it is larger than the cap."""
    cap = settings.SESSION_IMPORT_MAX_BYTES
    read = 0
    number = 0
    while True:
        line = stream.readline(cap - read + 1)
        if not line:
            return
        number += 1
        read += len(line)
        if read > cap:
            raise ImportRefused(number, f"the file is larger than {cap} bytes")
        yield number, line


def _parsed(number: int, line: bytes) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except ValueError:
        raise ImportRefused(number, "not a JSON object") from None
    if not isinstance(item, dict) or item.get("type") not in (*LINE_TYPES, "signature"):
        raise ImportRefused(number, "not a line of a session export")
    return item


def check_file(stream: IO[bytes]) -> dict[str, Any]:
    """Check the whole file; return its header and runs (ImportRefused on the first fault)."""
    signer = Signer()
    header: dict[str, Any] | None = None
    runs: dict[int, dict[str, Any]] = {}
    last_seq, records, signed, last = 0, 0, False, 0
    for number, line in _lines(stream):
        last = number
        if signed:
            raise ImportRefused(number, "a line after the signature")
        item = _parsed(number, line)
        kind = item["type"]
        if number == 1:
            header = _checked_header(item)
        elif kind == "signature":
            _check_signature(number, item, signer)
            signed = True
            continue
        elif kind == "record":
            last_seq = _checked_record(number, item, last_seq)
            records += 1
        elif kind == "run":
            if not isinstance(item.get("number"), int) or item["number"] in runs:
                raise ImportRefused(number, "a run without a number of its own")
            runs[item["number"]] = item
        signer.update(line)
    if header is None:
        raise ImportRefused(1, "the file is empty")
    if not signed:
        raise ImportRefused(last, "the file is not signed")
    if records != header.get("records"):
        raise ImportRefused(
            last, f"{records} records, the header announced {header.get('records')}"
        )
    return {"header": header, "runs": runs}


def _checked_header(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] != "header" or item.get("format") != FORMAT:
        raise ImportRefused(1, "not a session export (no header)")
    if item.get("format_version") != FORMAT_VERSION:
        raise ImportRefused(1, f"format version {item.get('format_version')!r} unknown")
    return item


def _check_signature(number: int, item: dict[str, Any], signer: Signer) -> None:
    if item.get("lines") != signer.lines or not signer.verifies(item.get("hmac", "")):
        raise ImportRefused(number, "the signature does not match: altered or foreign")


def _checked_record(number: int, item: dict[str, Any], last_seq: int) -> int:
    seq = item.get("seq")
    if not isinstance(seq, int) or seq <= last_seq:
        raise ImportRefused(number, f"seq {seq!r} out of order (after {last_seq})")
    if item.get("kind") not in RECORD_KINDS or not isinstance(item.get("run"), int):
        raise ImportRefused(number, "a record without a known kind or run")
    if not isinstance(item.get("entry_key"), str) or not isinstance(item.get("instance"), str):
        raise ImportRefused(number, "a record without an entry key or instance")
    return seq


def session_import(*, user, space, stream: IO[bytes], agent_version=None) -> Session:
    """Import the export in `stream` as a new session of `user` in `space`; return it."""
    require_member(user, space.pk)
    if agent_version is not None and agent_version.agent.space_id != space.pk:
        raise InvalidInput("Choose a version of an agent of this space.", field="agent_version")
    checked = check_file(stream)
    stream.seek(0)
    header = checked["header"]
    session = _staged_session(user, space, header, agent_version)
    runs = _copied_runs(session, checked["runs"])
    batch: list[SessionMessage] = []
    top = 0
    for _number, line in _lines(stream):
        item = json.loads(line)
        if item["type"] != "record":
            continue
        if item["run"] not in runs:
            runs.update(_copied_runs(session, {item["run"]: {"number": item["run"]}}))
        batch.append(_record(session, runs[item["run"]], item))
        top = item["seq"]
        if len(batch) == IMPORT_BATCH:
            _write(batch)
            batch = []
    _write(batch)
    with transaction.atomic(durable=True):
        # `upto`: the last imported record, which the note of rendering 6 follows.
        origin = {**session.origin, "upto": top}
        Session.objects.filter(pk=session.pk).update(staged=False, next_seq=top + 1, origin=origin)
    session.refresh_from_db()
    return session


def _staged_session(user, space, header, agent_version) -> Session:
    origin = header.get("session") or {}
    version = agent_version
    if version is None:
        version = AgentVersion.objects.filter(agent__space=space).order_by("-pk").first()
        if version is None:
            raise InvalidInput(
                "This space has no agent version to hold the session.", field="agent_version"
            )
    with transaction.atomic(durable=True):
        return Session.objects.create(
            space=space,
            agent_id=version.agent_id,
            agent_version=version,
            created_by=user,
            title=str(origin.get("title") or "")[:200],
            staged=True,
            read_only=agent_version is None,
            # A file may hold runs with no record (exported before their session's runs were
            # adopted into the journal): its first question looks for them, as in the original.
            runs_journaled=False,
            origin={
                "kind": "import",
                "session": origin.get("id"),
                "exported_at": header.get("exported_at"),
                "exported_by": header.get("exported_by"),
                "agentloom": header.get("agentloom"),
                "at": timezone.now().isoformat(),
            },
        )


def _copied_runs(session: Session, items: dict[int, dict[str, Any]]) -> dict[int, Run]:
    made = {}
    with transaction.atomic(durable=True):
        for number, item in sorted(items.items()):
            status = item.get("status")
            made[number] = Run.objects.create(
                session=session,
                number=number,
                origin_number=number,
                status=status if status in Run.FINISHED_STATUSES else Run.Status.CANCELLED,
                question=str(item.get("question") or ""),
                answer=item.get("answer") if isinstance(item.get("answer"), str) else None,
                error=str(item.get("error") or ""),
                counters=item.get("counters") if isinstance(item.get("counters"), dict) else {},
                finished_at=timezone.now(),
            )
    return made


def _record(session: Session, run: Run, item: dict[str, Any]) -> SessionMessage:
    try:
        created = datetime.fromisoformat(str(item.get("created_at")))
    except ValueError:
        created = timezone.now()
    return SessionMessage(
        session=session,
        seq=item["seq"],
        run=run,
        instance=item["instance"][:32],
        kind=item["kind"],
        entry_key=item["entry_key"][:200],
        local_seq=item.get("local_seq") if isinstance(item.get("local_seq"), int) else None,
        message=item.get("message"),
        created_at=created,
    )


def _write(batch: list[SessionMessage]) -> None:
    if batch:
        with transaction.atomic(durable=True):
            SessionMessage.objects.bulk_create(batch)
            index_records(batch)


def staged_discard(*, now: datetime | None = None) -> list[int]:
    """Remove the staged sessions of imports that stopped; return the ids removed."""
    cutoff = (now or timezone.now()) - STAGED_MAX_AGE
    stale = Session.objects.filter(staged=True, created_at__lt=cutoff).values_list("pk", flat=True)
    removed = []
    for session_id in list(stale):
        with transaction.atomic(durable=True):
            # Locked, and checked again: a publish that just happened keeps its session.
            session = Session.objects.select_for_update().filter(pk=session_id, staged=True).first()
            if session is not None:
                session.delete()
                removed.append(session_id)
    return removed
