"""Load a saved session (journal, runs and their checkpoints, views, model calls) into the database.

The fixtures in `tests/sessions_app/fixtures/` were written by the code of an earlier rendering
version (see their `made_by`): they are what a deployed database holds, so a rendering change
must keep rebuilding, resuming and replaying them exactly.
"""

from __future__ import annotations

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
