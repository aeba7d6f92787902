"""Encrypted columns depend on the field keys alone, rotate, are stored in binary, and never
unpickle code."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.management import call_command
from django.core.management.base import CommandError

from agentloom import encryption
from agentloom.encryption import UnreadableValue, restricted_loads
from agentloom.fields import encrypted_fields
from agentloom.reencrypt import reencrypt_all
from models_app.models import ModelConnection
from sessions_app.models import ModelCall, Run, RunSupplement, SessionMessage, SessionView
from sessions_app.services.replay import replay_run
from tests.factories import ask
from tests.sessions_app.conftest import SECRET, long_question
from tests.support.legacy_encryption import (
    legacy_token,
    read_raw,
    store_everything_as_legacy,
    store_raw,
)

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
OLD_FIELD_KEY = "old-field-key-NONCE-0123456789abcdefghijklmnop"
NEW_FIELD_KEY = "new-field-key-NONCE-0123456789abcdefghijklmnop"
OLD_SECRET_KEY = "old-secret-key-NONCE-0123456789abcdefghijklmnop"
NEW_SECRET_KEY = "new-secret-key-NONCE-0123456789abcdefghijklmnop"


def _fernet(key: str) -> Fernet:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentloom encrypted columns v1"
    ).derive(key.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


@pytest.fixture
def populated(alice, gateway, make_demo_session, settings):
    """A session with runs, journal, checkpoints, views, model calls, a supplement, an API key."""
    settings.FIELD_ENCRYPTION_KEY = OLD_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    session = make_demo_session(context_window=9_000)
    runs = [ask(session, alice, f'/tool big_output {{"chars": 1500}} NONCE-{n}') for n in range(4)]
    # Questions that need a summary: a compaction that only masks saves no view.
    runs += [ask(session, alice, long_question(n)) for n in range(4, 7)]
    RunSupplement.objects.create(run=runs[-1], position=1, text="NONCE-SUPPLEMENT")
    assert SessionView.objects.filter(session=session).exists()
    return session, runs


def _snapshot() -> dict:
    """Every encrypted value in the database, read through the fields."""
    values = {}
    for model, field in encrypted_fields():
        for pk, value in model.objects.values_list("pk", field.name):
            values[(model._meta.label, field.name, pk)] = value
    return values


def _stored() -> list[tuple[type, object, int, bytes]]:
    """Every encrypted value in the database as stored: (model, field, pk, bytes)."""
    found = []
    for model, field in encrypted_fields():
        for (pk,) in model.objects.exclude(**{f"{field.name}__isnull": True}).values_list("pk"):
            found.append((model, field, pk, read_raw(model, pk, field.column)))
    return found


def _as_fernet(raw: bytes) -> bytes:
    """Return a binary token stored after its mark as the base64 text `Fernet` reads."""
    assert raw[:2] == b"\x01\x80", raw[:8]
    return base64.urlsafe_b64encode(raw[1:])


def _under(key: str) -> tuple[int, int]:
    """Return (binary tokens under `key`, tokens under another key or in another form); empty
    values, which no key encrypts, count in neither."""
    fernet, under, other = _fernet(key), 0, 0
    for _model, _field, _pk, raw in _stored():
        if raw[:1] == b"\x02":
            continue
        try:
            fernet.extract_timestamp(base64.urlsafe_b64encode(raw[1:]))
        except InvalidToken:
            other += 1
            continue
        under += raw[:1] == b"\x01"
        other += raw[:1] != b"\x01"
    return under, other


def _empties() -> int:
    return sum(raw[:1] == b"\x02" for _model, _field, _pk, raw in _stored())


def _base64_token(value, *, compress: bool, key: str) -> bytes:
    """Return `value` stored as before the binary form: a Fernet token's base64 text."""
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    if compress and len(data) >= encryption.MIN_COMPRESSED_BYTES:
        data = b"z1:" + zlib.compress(data)
    return _fernet(key).encrypt(data)


# --- the format --------------------------------------------------------------------------------


def test_every_encrypted_column_is_covered():
    labels = {f"{model._meta.label}.{field.name}" for model, field in encrypted_fields()}
    assert labels == {
        "models_app.ModelConnection.api_key",
        "models_app.ModelConnection.previous_api_keys",
        "models_app.OAuthAuthorization.verifier",
        "models_app.OAuthConnection.access_token",
        "models_app.OAuthConnection.refresh_token",
        "models_app.OAuthRegistration.client_secret",
        "models_app.ToolServer.headers",
        "models_app.ToolServer.oauth_client_secret",
        "sessions_app.CompactionSnapshot.snapshot",
        "sessions_app.ModelCall.response",
        "sessions_app.Run.answer",
        "sessions_app.Run.approval_decisions",
        "sessions_app.Run.checkpoint",
        "sessions_app.Run.pending_approvals",
        "sessions_app.Run.pending_questions",
        "sessions_app.Run.pinned",
        "sessions_app.Run.question",
        "sessions_app.Run.question_answers",
        "sessions_app.Run.question_rounds",
        "sessions_app.RunDelta.data",
        "sessions_app.RunSupplement.text",
        "sessions_app.ProjectionPoint.state",
        "sessions_app.Session.pinned",
        "sessions_app.Session.title",
        "sessions_app.SessionDeletion.session_title",
        "sessions_app.SessionMessage.message",
        "sessions_app.SessionView.messages",
        "sessions_app.StoredMessage.message",
    }


def test_values_are_fernet_tokens_of_json_under_the_field_key(populated):
    session, runs = populated
    raw = read_raw(Run, runs[0].pk, "question")
    assert raw.startswith(b"\x01\x80") and b"NONCE" not in raw  # the mark, then a binary token
    question = Run.objects.get(pk=runs[0].pk).question
    assert json.loads(_fernet(OLD_FIELD_KEY).decrypt(_as_fernet(raw))) == question
    key = read_raw(ModelConnection, session.agent.model_connection_id, "api_key")
    assert json.loads(_fernet(OLD_FIELD_KEY).decrypt(_as_fernet(key))) == SECRET
    message = SessionMessage.objects.filter(session=session).order_by("seq").first()
    stored = read_raw(SessionMessage, message.pk, "message")
    stored = _fernet(OLD_FIELD_KEY).decrypt(_as_fernet(stored))
    assert stored.startswith((b"{", b"z1:"))  # JSON, compressed when large; never a pickle


def test_prose_columns_are_stored_compressed_and_older_values_still_read(populated):
    """A run's question, answer and pinned instructions, a supplement and a session's pinned
    instructions are compressed before encryption once long enough; short ones, secrets and
    values written uncompressed before read as ever."""
    session, runs = populated
    fernet = _fernet(OLD_FIELD_KEY)
    prose = "NONCE-PROSE the answer goes on about the build and its cache. " * 8
    run = Run.objects.get(pk=runs[-1].pk)
    run.question, run.answer, run.pinned = prose, prose, prose
    run.save(update_fields=["question", "answer", "pinned"])
    supplement = RunSupplement.objects.get(run=run)
    supplement.text = prose
    supplement.save(update_fields=["text"])
    session.pinned = prose
    session.save(update_fields=["pinned"])
    rows = [(Run, run.pk, column) for column in ("question", "answer", "pinned")]
    rows += [(RunSupplement, supplement.pk, "text"), (type(session), session.pk, "pinned")]
    for model, pk, column in rows:
        plain = fernet.decrypt(_as_fernet(read_raw(model, pk, column)))
        assert plain.startswith(b"z1:"), (model, column)
        assert json.loads(zlib.decompress(plain[3:])) == prose
        assert len(read_raw(model, pk, column)) < len(encryption.encrypt(prose)) - 100
    # Short text is not worth compressing; a secret column never compresses.
    assert fernet.decrypt(_as_fernet(read_raw(Run, runs[0].pk, "question"))).startswith(b'"')
    key = read_raw(ModelConnection, session.agent.model_connection_id, "api_key")
    assert fernet.decrypt(_as_fernet(key)).startswith(b'"')
    # A value stored before the column compressed reads back as it was written.
    store_raw(Run, run.pk, "answer", encryption.encrypt("NONCE-OLD " * 40))
    assert Run.objects.get(pk=run.pk).answer == "NONCE-OLD " * 40


def test_rotating_secret_key_keeps_everything_readable(populated, settings):
    before = _snapshot()
    settings.SECRET_KEY = NEW_SECRET_KEY
    settings.SECRET_KEY_FALLBACKS = []
    assert _snapshot() == before
    _session, runs = populated
    report = replay_run(Run.objects.get(pk=runs[-1].pk))
    assert report.ok, "\n".join(report.differences)


def test_a_fallback_field_key_reads_and_a_missing_one_does_not(populated, settings):
    before = _snapshot()
    settings.FIELD_ENCRYPTION_KEY = NEW_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = [OLD_FIELD_KEY]
    assert _snapshot() == before
    # New writes use the new key; old rows still read through the fallback.
    run = Run.objects.get(pk=populated[1][0].pk)
    run.question = "NONCE-REWRITTEN"
    run.save(update_fields=["question"])
    assert _fernet(NEW_FIELD_KEY).decrypt(_as_fernet(read_raw(Run, run.pk, "question")))
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    with pytest.raises(UnreadableValue):
        SessionMessage.objects.filter(session=populated[0]).first()


def test_values_come_back_as_json_would_return_them():
    value = {"t": (1, 2), "n": None, "f": 1.5, "s": "caf\u00e9 \ud800 \U0001f600", "b": True}
    assert encryption.decrypt(encryption.encrypt(value)) == json.loads(json.dumps(value))
    assert encryption.decrypt(encryption.encrypt(value, compress=True)) == json.loads(
        json.dumps(value)
    )


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("form", ["binary", "empty", "base64", "legacy"])
def test_each_stored_form_reads_back(form, compress, settings):
    value = {"role": "tool", "content": "NONCE-FORM " * (50 if compress else 1)}
    if form == "empty":
        value = {}
    if form in ("binary", "empty"):
        stored = encryption.encrypt(value, compress=compress)
    elif form == "base64":
        stored = _base64_token(value, compress=compress, key=settings.FIELD_ENCRYPTION_KEY)
    else:
        stored = legacy_token(value, compress=compress)
    first = {"binary": b"\x01", "empty": b"\x02", "base64": b"g", "legacy": b"\x80"}[form]
    assert stored[:1] == first and b"NONCE" not in stored
    assert encryption.decrypt(stored) == value
    assert encryption.decrypt_sized(stored)[0] == value
    assert encryption.is_current(stored) is (form in ("binary", "empty"))


@pytest.mark.parametrize("value", ["", {}, []])
def test_an_empty_value_is_its_mark_and_json_and_needs_no_key(value, settings):
    stored = encryption.encrypt(value, compress=True)
    assert stored == b"\x02" + json.dumps(value).encode()
    assert encryption.decrypt_sized(stored) == (value, 2)
    assert type(encryption.decrypt(stored)) is type(value)
    settings.FIELD_ENCRYPTION_KEY = NEW_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    assert encryption.decrypt(stored) == value and encryption.is_current(stored)
    # Anything else, however short, is a token.
    for other in (" ", "a", [None], {"a": 1}, 0, False):
        assert encryption.encrypt(other)[:2] == b"\x01\x80"


def test_a_runs_empty_defaults_are_stored_in_three_bytes(alice, gateway, make_demo_session):
    run = ask(make_demo_session(), alice, "NONCE-EMPTY")
    assert read_raw(Run, run.pk, "pending_approvals") == b"\x02[]"
    assert read_raw(Run, run.pk, "approval_decisions") == b"\x02{}"
    assert read_raw(Run, run.pk, "pinned") == b'\x02""'
    assert Run.objects.get(pk=run.pk).pending_approvals == []


def test_a_journal_row_is_stored_a_quarter_smaller_than_its_base64_token(populated):
    session, _runs = populated
    rows = SessionMessage.objects.filter(session=session).values_list("pk", flat=True)
    stored = [read_raw(SessionMessage, pk, "message") for pk in rows]
    assert stored and all(raw[:2] == b"\x01\x80" for raw in stored)
    as_base64 = sum(len(_as_fernet(raw)) for raw in stored)
    ratio = sum(len(raw) for raw in stored) / as_base64
    assert 0.74 < ratio < 0.76, ratio
    # What the row would have held before: the same token in base64, which reads the same.
    for pk, raw in zip(rows, stored, strict=True):
        assert encryption.decrypt(_as_fernet(raw)) == encryption.decrypt(raw)
        assert SessionMessage.objects.get(pk=pk).message == encryption.decrypt(raw)


def _flipped(token: bytes, at: int) -> bytes:
    return token[:at] + bytes([token[at] ^ 1]) + token[at + 1 :]


@pytest.mark.parametrize(
    "bad",
    [
        lambda token, text: token[:-1],  # truncated
        lambda token, text: _flipped(token, 30),  # a ciphertext byte changed
        lambda token, text: token[:1] + b"\x81" + token[2:],  # another Fernet version
        lambda token, text: b"\x01" + text,  # a base64 token behind the binary mark
        lambda token, text: b"\x01" + legacy_token("NONCE-MARKED"),  # a legacy value behind it
        lambda token, text: b"\x01",
        lambda token, text: b"\x02" + b'"NONCE"',  # a value behind the empty mark
        lambda token, text: b"\x02" + b"null",
        lambda token, text: b"\x02[] ",
        lambda token, text: b"\x02",
        lambda token, text: b"\x02" + token[1:],
        lambda token, text: b"\x03" + token[1:],  # no form starts so
        lambda token, text: b"",
    ],
    ids=[
        "truncated",
        "flipped",
        "version",
        "base64-marked",
        "legacy-marked",
        "mark-alone",
        "empty-mark-value",
        "empty-mark-null",
        "empty-mark-space",
        "empty-mark-alone",
        "empty-mark-token",
        "unknown-mark",
        "nothing",
    ],
)
def test_a_mark_with_anything_but_its_form_is_unreadable(bad, settings):
    token = encryption.encrypt("NONCE-MARKED")
    text = _base64_token("NONCE-MARKED", compress=False, key=settings.FIELD_ENCRYPTION_KEY)
    stored = bad(token, text)
    with pytest.raises(UnreadableValue):
        encryption.decrypt(stored)
    with pytest.raises(UnreadableValue):
        encryption.decrypt_sized(stored)
    assert not encryption.is_current(stored)


def test_a_token_is_opened_only_when_its_mac_is_a_field_keys(settings):
    """The AES key alone opens nothing: a token whose ciphertext is right for the field key but
    whose HMAC was made with another key is unreadable, as `Fernet` finds it."""
    fields = encryption._derived_key(settings.FIELD_ENCRYPTION_KEY)
    forged = Fernet(base64.urlsafe_b64encode(bytes(16) + fields[16:])).encrypt(b'"NONCE-MAC"')
    stored = b"\x01" + base64.urlsafe_b64decode(forged)
    with pytest.raises(UnreadableValue):
        encryption.decrypt(stored)
    with pytest.raises(UnreadableValue):
        encryption.decrypt_text(stored)
    genuine = Fernet(base64.urlsafe_b64encode(fields)).encrypt(b'"NONCE-MAC"')
    assert encryption.decrypt(b"\x01" + base64.urlsafe_b64decode(genuine)) == "NONCE-MAC"
    # What the reader returns for every token is what Fernet returns: sizes across a block.
    for size in range(1, 40):
        value = "x" * size
        stored = encryption.encrypt(value)
        assert _fernet(settings.FIELD_ENCRYPTION_KEY).decrypt(_as_fernet(stored)) == (
            json.dumps(value).encode()
        )
        assert encryption.decrypt(stored) == value


def test_an_unreadable_mark_stops_rotation_naming_the_keys(populated, settings):
    _session, runs = populated
    store_raw(Run, runs[0].pk, "pinned", b"\x02" + b'"NONCE"')
    with pytest.raises(UnreadableValue):
        Run.objects.get(pk=runs[0].pk)
    with pytest.raises(CommandError, match="FIELD_ENCRYPTION_KEY_FALLBACKS"):
        call_command("rotate_encryption_key")


# --- rotation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"role": "user", "content": "短い NONCE-SIZED"},
        {"role": "tool", "content": "NONCE-LONG " * 400, "n": 1.5, "ok": True, "x": None},
    ],
)
def test_a_value_is_read_with_the_byte_size_of_its_compact_json(value):
    stored = encryption.encrypt(value, compress=True)

    read, size = encryption.decrypt_sized(stored)

    assert read == encryption.decrypt(stored) == value
    assert size == len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_a_size_is_not_known_for_a_legacy_value_or_a_lone_surrogate():
    assert encryption.decrypt_sized(legacy_token({"content": "NONCE-OLD"})) == (
        {"content": "NONCE-OLD"},
        None,
    )
    lone = {"content": "NONCE-\ud800"}
    assert encryption.decrypt_sized(encryption.encrypt(lone)) == (lone, None)


def test_rotate_moves_every_value_to_the_new_key_and_resumes_after_an_interruption(
    populated, settings, capsys
):
    before = _snapshot()
    total = sum(1 for value in before.values() if value is not None) - _empties()
    settings.FIELD_ENCRYPTION_KEY = NEW_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = [OLD_FIELD_KEY]
    assert _under(NEW_FIELD_KEY) == (0, total)

    class Interrupted(Exception):
        pass

    batches = []

    def stop_after_three_batches(report):
        batches.append(report.label)
        if len(batches) == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        reencrypt_all(batch_size=2, on_batch=stop_after_three_batches)
    done, left = _under(NEW_FIELD_KEY)
    assert 0 < done < total and left == total - done, "the committed batches are kept"

    call_command("rotate_encryption_key", "--batch-size", "3")
    assert f"rewrote {left} value(s)" in capsys.readouterr().out
    assert _under(NEW_FIELD_KEY) == (total, 0)
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []  # the old key can now be dropped
    assert _snapshot() == before
    call_command("rotate_encryption_key")
    assert "rewrote 0 value(s)" in capsys.readouterr().out


def test_rotation_rewrites_base64_values_in_the_binary_and_empty_forms(populated, settings, capsys):
    before = _snapshot()
    count = 0
    for model, field, pk, _raw in _stored():
        value = before[(model._meta.label, field.name, pk)]
        store_raw(
            model,
            pk,
            field.column,
            _base64_token(value, compress=field.compress, key=OLD_FIELD_KEY),
        )
        count += 1
    assert {raw[:6] for *_rest, raw in _stored()} == {b"gAAAAA"}
    assert _snapshot() == before  # read as they are until rewritten

    call_command("rotate_encryption_key", "--batch-size", "7")  # the same key: only the form
    assert f"rewrote {count} value(s)" in capsys.readouterr().out
    assert {raw[:1] for *_rest, raw in _stored()} == {b"\x01", b"\x02"}
    assert _under(OLD_FIELD_KEY) == (count - _empties(), 0)
    assert _snapshot() == before
    call_command("rotate_encryption_key")
    assert "rewrote 0 value(s)" in capsys.readouterr().out


def test_rotate_names_the_missing_key_and_keeps_what_it_did(populated, settings):
    settings.FIELD_ENCRYPTION_KEY = NEW_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    with pytest.raises(CommandError, match="FIELD_ENCRYPTION_KEY_FALLBACKS"):
        call_command("rotate_encryption_key")


def test_a_value_saved_meanwhile_is_left_as_the_application_wrote_it(populated, settings):
    settings.FIELD_ENCRYPTION_KEY = NEW_FIELD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = [OLD_FIELD_KEY]
    run = populated[1][0]
    original = encryption.reencrypt

    def worker_saves_first(token, *, compress):
        Run.objects.filter(pk=run.pk).update(question="NONCE-SAVED-MEANWHILE")
        return original(token, compress=compress)

    from agentloom import reencrypt as module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module.encryption, "reencrypt", worker_saves_first)
        report = module.reencrypt_column(Run, Run._meta.get_field("question"))
    assert report.changed_meanwhile >= 1
    assert Run.objects.get(pk=run.pk).question == "NONCE-SAVED-MEANWHILE"


# --- legacy values -----------------------------------------------------------------------------


def test_legacy_values_read_with_secret_key_or_its_fallbacks(populated, settings):
    _session, runs = populated
    settings.SECRET_KEY = OLD_SECRET_KEY
    store_raw(Run, runs[0].pk, "question", legacy_token("NONCE-OLD-QUESTION"))
    assert Run.objects.get(pk=runs[0].pk).question == "NONCE-OLD-QUESTION"
    settings.SECRET_KEY = NEW_SECRET_KEY
    settings.SECRET_KEY_FALLBACKS = [OLD_SECRET_KEY]
    assert Run.objects.get(pk=runs[0].pk).question == "NONCE-OLD-QUESTION"
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(UnreadableValue, match="SECRET_KEY"):
        Run.objects.get(pk=runs[0].pk)


def test_legacy_values_written_by_django_cryptography_are_read(settings):
    crypto = pytest.importorskip("django_cryptography.utils.crypto")
    signing = pytest.importorskip("django_cryptography.core.signing")
    aes_key = encryption._legacy_aes_key(settings.FIELD_ENCRYPTION_KEY)
    writer = crypto.FernetBytes(aes_key, signing.FernetSigner(settings.SECRET_KEY))
    value = {"role": "user", "content": "NONCE", "n": [1, 2.5, None, True]}
    assert encryption.decrypt(writer.encrypt(pickle.dumps(value))) == value
    assert encryption.decrypt(writer.encrypt(pickle.dumps("NONCE-TEXT"))) == "NONCE-TEXT"


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/agentloom-pwned-NONCE",))


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(_Exploit()),
        pickle.dumps({"role": "user", "content": _Exploit()}),
        pickle.dumps({"when": __import__("datetime").date(2026, 1, 1)}),
        pickle.dumps({1, 2}),
        pickle.dumps({"b": b"bytes"}),
        pickle.dumps(_Exploit(), protocol=0),
    ],
    ids=["reduce", "nested-reduce", "date", "set", "bytes", "protocol-0"],
)
def test_the_legacy_reader_refuses_anything_but_json_like_values(payload, settings, tmp_path):
    marker = Path("/tmp/agentloom-pwned-NONCE")
    marker.unlink(missing_ok=True)
    with pytest.raises(UnreadableValue):
        restricted_loads(payload)
    with pytest.raises(UnreadableValue):
        encryption.decrypt(legacy_token(None, payload=payload))
    assert not marker.exists(), "the payload ran"


def test_convert_legacy_rewrites_everything_and_frees_the_secret_key(populated, settings, capsys):
    settings.SECRET_KEY = OLD_SECRET_KEY
    before = _snapshot()
    count = store_everything_as_legacy()
    assert count == sum(1 for value in before.values() if value is not None)
    assert _under(OLD_FIELD_KEY) == (0, count)
    assert _snapshot() == before  # read transparently until converted

    call_command("convert_legacy_encryption", "--batch-size", "5")
    assert f"rewrote {count} value(s)" in capsys.readouterr().out
    assert _empties() > 0  # the runs' empty defaults
    assert _under(OLD_FIELD_KEY) == (count - _empties(), 0)
    settings.SECRET_KEY = NEW_SECRET_KEY  # no fallback: nothing depends on it any more
    assert _snapshot() == before
    call_command("convert_legacy_encryption")
    assert "rewrote 0 value(s)" in capsys.readouterr().out


def test_no_module_of_django_cryptography_is_loaded():
    code = (
        "import sys, django; django.setup();"
        "from django.db.migrations.loader import MigrationLoader;"
        "loader = MigrationLoader(None, ignore_no_migrations=True);"
        "[loader.project_state(key) for key in loader.graph.leaf_nodes()];"
        "import sessions_app.models, models_app.models, agentloom.reencrypt;"
        "print(sorted(m for m in sys.modules if m.startswith('django_cryptography')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_model_call_responses_and_views_survive_conversion(populated, settings):
    session, _runs = populated
    calls = {c.pk: c.response for c in ModelCall.objects.filter(run__session=session)}
    views = {v.pk: v.messages for v in SessionView.objects.filter(session=session)}
    store_everything_as_legacy()
    call_command("convert_legacy_encryption")
    assert {c.pk: c.response for c in ModelCall.objects.filter(run__session=session)} == calls
    assert {v.pk: v.messages for v in SessionView.objects.filter(session=session)} == views
