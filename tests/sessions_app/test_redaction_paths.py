"""A key pasted into a question is redacted on every path that writes, not only the engine's."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from models_app.models import ModelConnection
from models_app.services.connections import connection_update
from models_app.services.redaction import PREVIOUS_KEY_DAYS, PREVIOUS_KEYS_KEPT, redaction_secrets
from sessions_app.models import Run
from sessions_app.services.execution import run_execute
from sessions_app.services.legacy import adopt_legacy_runs
from sessions_app.services.runs import run_ask, run_cancel, run_resume, supplement_add
from tests.factories import ask, make_run
from tests.sessions_app.conftest import SECRET
from tests.support.legacy_encryption import read_raw

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


# --- keys that were replaced ------------------------------------------------------------------

NEW_KEY = "sk-live-NONCE-rotated-key-9876543210"


@pytest.fixture
def rotated(alice, gateway, make_demo_session, settings):
    """A session whose connection's key SECRET was just replaced by NEW_KEY."""
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    session = make_demo_session(provider="openai_compatible")
    connection = session.agent.model_connection
    connection_update(user=alice, connection=connection, api_key=NEW_KEY)
    connection.refresh_from_db()
    assert connection.api_key == NEW_KEY
    return session, connection


def test_a_rotated_key_stays_redacted(alice, gateway, rotated):
    session, connection = rotated
    run = ask(session, alice, f"old {SECRET} new {NEW_KEY} [leak-key]")
    failed = ask(session, alice, f"fail with {SECRET} [boom]")
    run_resume(user=alice, run=failed)
    supplement_add(user=alice, run=failed, text=f"again {SECRET}")
    run_execute(run_id=failed.pk)
    sent = json.dumps([request.messages for request in gateway.requests])
    stored = _every_stored_value()
    for text in (sent, stored):
        assert "[redacted]" in text
        assert SECRET not in text and NEW_KEY not in text
    # The answer the model gave with the old key in it is served redacted too.
    assert SECRET not in Run.objects.get(pk=run.pk).answer
    # Kept encrypted, never shown: the column holds no key in clear.
    raw = read_raw(ModelConnection, connection.pk, "previous_api_keys")
    assert raw.startswith(b"\x01\x80") and SECRET.encode() not in raw  # a binary Fernet token


def test_previous_keys_are_kept_in_number_and_age(alice, rotated):
    _, connection = rotated
    assert redaction_secrets(connection) == [NEW_KEY, SECRET]
    keys = [f"sk-live-NONCE-key-{n}" for n in range(PREVIOUS_KEYS_KEPT)]
    for key in keys:
        connection = connection_update(user=alice, connection=connection, api_key=key)
    # The newest key and the PREVIOUS_KEYS_KEPT keys before it; SECRET has dropped out.
    assert redaction_secrets(connection) == [keys[-1], *reversed(keys[:-1]), NEW_KEY]
    later = timezone.now() + timedelta(days=PREVIOUS_KEY_DAYS, hours=1)
    assert redaction_secrets(connection, now=later) == [keys[-1]]
    # A key given again is the current key, not also a previous one.
    connection = connection_update(user=alice, connection=connection, api_key=NEW_KEY)
    assert redaction_secrets(connection).count(NEW_KEY) == 1
