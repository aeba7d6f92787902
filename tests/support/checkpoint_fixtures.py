"""Load a saved session (journal, runs and their checkpoints, views, model calls) into the database.

The fixtures in `tests/sessions_app/fixtures/` were written by the code of an earlier rendering
version (see their `made_by`): they are what a deployed database holds, so a rendering change
must keep rebuilding, resuming and replaying them exactly.
"""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

from context_app.models import AgentVersion
from sessions_app.models import ModelCall, Run, RunSupplement, Session, SessionMessage, SessionView
from tests.factories import make_agent, make_connection, make_space

FIXTURES = Path(__file__).resolve().parent.parent / "sessions_app" / "fixtures"
LOCAL_ENDPOINT = "http://127.0.0.1:9/v1"


def fixture(name: str) -> dict[str, Any]:
    """Return the fixture document `name` (without `.json`)."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def load_session(name: str, *, user, base_url: str = LOCAL_ENDPOINT) -> Session:
    """Insert fixture `name` as a new session of `user` and return it."""
    doc = fixture(name)
    snapshot = json.loads(json.dumps(doc["snapshot"]))
    budget = snapshot["budget"]
    space = make_space(admin=user)
    connection = make_connection(
        space,
        provider=budget["provider"],
        base_url="" if budget["provider"] == "local" else base_url,
        model_id=budget["model_id"],
        context_window=budget["context_window"],
        max_output_tokens=budget["max_output_tokens"],
        safety_margin_tokens=budget["safety_margin_tokens"],
    )
    agent = make_agent(space, user, connection=connection, name=snapshot["agent"]["name"])
    snapshot["agent"]["id"] = agent.pk
    budget["connection_id"] = connection.pk
    version = AgentVersion.objects.create(
        agent=agent, number=1, snapshot=snapshot, model_connection=connection, published_by=user
    )
    last_seq = max((m["seq"] for m in doc["messages"]), default=0)
    session = Session.objects.create(
        space=space, agent=agent, agent_version=version, created_by=user, next_seq=last_seq + 1
    )
    runs = {data["number"]: Run.objects.create(session=session, **data) for data in doc["runs"]}
    for data in doc["runs"]:
        # `auto_now_add` stamped them now; which view a run may reuse depends on the real times.
        Run.objects.filter(pk=runs[data["number"]].pk).update(created_at=data["created_at"])
    for rows, model in (
        (doc["messages"], SessionMessage),
        (doc["model_calls"], ModelCall),
        (doc["supplements"], RunSupplement),
    ):
        model.objects.bulk_create(
            model(**{**row, "run": runs[row["run"]], **_session_of(model, session)}) for row in rows
        )
    for row in doc["views"]:
        run = runs.get(row["run"]) if row["run"] is not None else None
        view = SessionView.objects.create(**{**row, "run": run, "session": session})
        SessionView.objects.filter(pk=view.pk).update(created_at=row["created_at"])
    for run in runs.values():
        run.refresh_from_db()
    return session


def _session_of(model, session: Session) -> dict[str, Any]:
    return {"session": session} if model is SessionMessage else {}


def _plain(value: Any) -> Any:
    # Times keep their microseconds (records name them, to the microsecond, in checkpoints).
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def dump_session(session: Session, *, made_by: str, rendering: int) -> dict[str, Any]:
    """Return `session` as a fixture document, as `load_session` reads it back.

    Every row as the database holds it (encrypted fields decrypted), runs and rows named by run
    number, plus `expanded`: each run's checkpoint as the code of `made_by` rebuilds it.
    """
    from sessions_app.selectors.checkpoints import full_checkpoint

    runs = list(Run.objects.filter(session=session).order_by("number"))
    number = {run.pk: run.number for run in runs}

    def row(obj, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        data = {}
        for field in obj._meta.concrete_fields:
            if field.primary_key or field.name in (
                "session",
                "space",
                "agent",
                "agent_version",
                "created_by",
                *skip,
            ):
                continue
            value = getattr(obj, field.attname)
            data[field.name] = number.get(value) if field.name == "run" else value
        return json.loads(json.dumps(data, default=_plain, sort_keys=True))

    snapshot = session.agent_version.snapshot
    return {
        "made_by": made_by,
        "rendering": rendering,
        "session": {key: row(session)[key] for key in ("created_at", "next_seq")},
        "snapshot": snapshot,
        "runs": [row(run) for run in runs],
        "messages": [
            row(m) for m in SessionMessage.objects.filter(session=session).order_by("seq")
        ],
        "model_calls": [
            row(c) for c in ModelCall.objects.filter(run__session=session).order_by("id")
        ],
        "supplements": [
            row(s) for s in RunSupplement.objects.filter(run__session=session).order_by("id")
        ],
        "views": [
            row(view, skip=("derived_from", "revoked_by"))
            for view in SessionView.objects.filter(session=session).order_by("revision")
        ],
        "expanded": {str(run.number): full_checkpoint(run) for run in runs},
    }
