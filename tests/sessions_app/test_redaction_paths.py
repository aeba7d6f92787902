"""A key pasted into a question is redacted on every path that writes, not only the engine's."""

from __future__ import annotations

import json

import pytest
from django.apps import apps

from sessions_app.models import Run
from sessions_app.services.legacy import adopt_legacy_runs
from sessions_app.services.runs import run_ask, run_cancel, run_resume, supplement_add
from tests.factories import make_run
from tests.sessions_app.conftest import SECRET, ask

pytestmark = pytest.mark.django_db


def _every_stored_value() -> str:
    """Return every value of every row of the project's apps, decrypted, as one text."""
    texts = []
    for label in ("sessions_app", "context_app"):
        for model in apps.get_app_config(label).get_models():
            for row in model.objects.all():
                for field in model._meta.concrete_fields:
                    texts.append(json.dumps(getattr(row, field.attname), default=str))
    return "\n".join(texts)


def test_a_pasted_key_is_redacted_on_every_path(alice, gateway, make_demo_session):
    session = make_demo_session()
    # A run that executes, one that fails, and a supplement.
    ask(session, alice, f"run with {SECRET}")
    failed = ask(session, alice, f"fail with {SECRET} [boom]")
    assert failed.status == Run.Status.FAILED
    # A question cancelled while queued: journaled by the service, not by an engine.
    queued = run_ask(user=alice, session=session, question=f"queued {SECRET}")
    run_cancel(user=alice, run=queued)
    # A resume with a supplement waiting for it.
    run_resume(user=alice, run=failed)
    supplement_add(user=alice, run=failed, text=f"supplement {SECRET}")
    # Legacy adoption of a run recorded before the journal existed.
    legacy = make_run(session, status="failed", number=99, question=f"legacy {SECRET}")
    Run.objects.filter(pk=legacy.pk).update(
        checkpoint={
            "format": 1,
            "instance": "main",
            "messages": [{"role": "user", "content": f"legacy {SECRET}"}],
            "state": {},
            "context": {"compactions": [], "counters": {}},
        }
    )
    adopt_legacy_runs(session=session)
    stored = _every_stored_value()
    assert "[redacted]" in stored
    assert SECRET not in stored
