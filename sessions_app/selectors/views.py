"""Reads of reusable views: the view a new run reuses, where each view derives from, its content.

The rule that says which view a new run may reuse is stated in `services.reusable_views`; this
module chooses by it. Choosing a view reads clear index columns only; only the chosen view is
decrypted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from agentloom.engine import Origin, materialize
from sessions_app.models import JournalReference, Run, Session, SessionView
from sessions_app.selectors.journal import journal_messages
from sessions_app.selectors.stored_messages import messages_read


def binding_key(binding: dict[str, Any]) -> str:
    """Return the digest under which views saved with `binding` are found."""
    text = json.dumps(binding, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Derivation:
    """Where a view comes from: the view it derives from, and the revoked view in its chain."""

    derived_from: int | None = None
    # The nearest revoked view in its chain of `derived_from`: the view is revoked by derivation.
    revoked_ancestor: int | None = None


def view_derivations(session_id: int) -> dict[int, Derivation]:
    """Return the derivation of each view of the session, by revision (one clear-column query)."""
    rows = (
        SessionView.objects.filter(session_id=session_id)
        .order_by("revision")
        .values_list("pk", "revision", "derived_from_id", "revoked_at")
    )
    revision_of: dict[int, int] = {}
    revoked: set[int] = set()
    found: dict[int, Derivation] = {}
    # A view derives only from an earlier one, so its parent is settled before it.
    for pk, revision, parent, revoked_at in rows:
        revision_of[pk] = revision
        if revoked_at is not None:
            revoked.add(pk)
        if parent is None:
            found[revision] = Derivation()
            continue
        source = revision_of[parent]
        found[revision] = Derivation(
            derived_from=source,
            revoked_ancestor=source if parent in revoked else found[source].revoked_ancestor,
        )
    return found


def compliant_view(
    session: Session, binding: dict[str, Any], *, as_of: Run | None = None
) -> SessionView | None:
    """Return the highest-watermark reusable view saved under `binding`, or None.

    Neither a revoked view nor one revoked by derivation is chosen. `as_of` limits the choice to
    what existed when that run's question was asked. Candidates are matched on clear columns;
    nothing is decrypted. A question asked before anything was journaled (inherited watermark 0)
    has none to choose from, as a view stands for at least one record. The cost does not grow
    with the session's views: one query finds the best candidate (the only one for a session
    without views), one more asks whether any view of the session is revoked; only then, since
    a view is revoked by derivation only below a revoked one, are the views' derivations read.
    """
    if as_of is not None and as_of.inherited_watermark < 1:
        return None
    views = SessionView.objects.filter(
        session=session, binding_key=binding_key(binding), revoked_at__isnull=True
    )
    if as_of is not None:
        views = views.filter(
            watermark__lte=as_of.inherited_watermark, created_at__lt=as_of.created_at
        )
    views = views.defer("messages").order_by("-watermark", "-revision")
    chosen = views.first()
    if chosen is None:
        return None
    if not SessionView.objects.filter(session=session, revoked_at__isnull=False).exists():
        return chosen
    return views.exclude(
        revision__in=[
            revision
            for revision, derivation in view_derivations(session.pk).items()
            if derivation.revoked_ancestor is not None
        ]
    ).first()


def view_content(view: SessionView) -> tuple[list[dict[str, Any]], list[Origin]]:
    """Return the messages of `view` and where each came from (one query for its references, and
    one for the messages it stores once)."""
    inline = messages_read(view.session_id, view.messages)
    if not view.entries:
        return list(inline), [None] * len(inline)
    seqs = [entry["s"] for entry in view.entries if "s" in entry]
    found = journal_messages(view.session_id, seqs)
    messages: list[dict[str, Any]] = []
    origins: list[Origin] = []
    for entry in view.entries:
        if "i" in entry:
            messages.append(inline[entry["i"]])
            origins.append({"src": entry["src"]} if "src" in entry else None)
        else:
            messages.append(materialize(entry, found[entry["s"]]))
            origins.append(dict(entry))
    return messages, origins


def views_of(session: Session) -> QuerySet[SessionView]:
    """Return the session's reusable views without their (encrypted) messages."""
    return (
        SessionView.objects.filter(session=session)
        .defer("messages", "entries")
        .order_by("revision")
    )


def view_references(view: SessionView) -> QuerySet[JournalReference]:
    """Return the `JournalReference` rows that keep the records `view` refers to.

    Those of the run's compaction snapshot the view was saved from, and rows of its own for a
    view saved before references were written once.
    """
    return JournalReference.objects.filter(
        Q(run_id=view.run_id, snapshot_revision=view.snapshot_revision) | Q(view=view)
    )


def referenced_seqs(references: QuerySet[JournalReference]) -> set[int]:
    """Return the session seqs of the journal records `references` keep (ranges or one each)."""
    return {
        seq
        for first, last in references.values_list("message__seq", "last__seq")
        for seq in range(first, (first if last is None else last) + 1)
    }
