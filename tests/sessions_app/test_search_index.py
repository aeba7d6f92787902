"""The journal's keyed search index: written with every record, searched by `search_history` and
the console, rebuilt on key rotation, gone with its session, never holding text."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agentloom import encryption
from agentloom.engine import RecordStore, SearchQuery
from sessions_app.models import JournalTerms, Run, SessionMessage
from sessions_app.selectors.search import search_journal
from sessions_app.services.execution import SlottedStore
from sessions_app.services.fork import session_fork
from sessions_app.services.replay import replay_run
from tests.factories import ask

pytestmark = pytest.mark.django_db

TOOLS = ["echo", "big_output", "search_history"]
OLD_KEY = "old-field-key-NONCE-0123456789abcdefghijklmnop"
NEW_KEY = "new-field-key-NONCE-0123456789abcdefghijklmnop"


def _find(session, text: str, **arguments) -> list[int]:
    query = SearchQuery.from_arguments({"query": text, **arguments})
    return [int(hit.ref[2:]) for hit in search_journal(session.pk, query, main_only=False)]


def _seq_of(session, needle: str) -> int:
    for seq, message in SessionMessage.objects.filter(session=session).values_list(
        "seq", "message"
    ):
        if needle in str(message.get("content")):
            return seq
    raise AssertionError(f"{needle} is not journaled")


def test_every_searchable_record_is_indexed_as_it_is_journaled(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, '/tool echo {"text": "NONCE-ECHOED at /srv/app/config.toml"}')
    rows = SessionMessage.objects.filter(session=session)
    searchable = set(rows.exclude(kind="status").values_list("seq", flat=True))
    indexed = set(JournalTerms.objects.filter(session=session).values_list("seq", flat=True))
    assert indexed == searchable and searchable
    # The question and the tool's result both hold the path: the result, the later, first.
    holding = [
        seq
        for seq, message in rows.values_list("seq", "message")
        if "/srv/app/config.toml" in str(message.get("content"))
    ]
    assert len(holding) >= 2  # the question, the tool's result and the answer that repeats it
    found = _find(session, "/srv/app/config.toml")
    assert found[0] == max(holding) and set(holding) <= set(found)


def test_a_run_searches_the_journal_and_its_replay_matches(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, "The build id is build-7731; the bucket is s3://nonce-bucket-71/logs.")
    for n in range(3):
        ask(session, alice, f"unrelated question {n}")
    stated = _seq_of(session, "build-7731")
    run = ask(
        session,
        alice,
        '/tool search_history {"query": "build-7731"}\n'
        f'/tool read_record {{"ref": "s:{stated}"}}',
    )
    assert run.status == Run.Status.SUCCEEDED, run.error
    results = [
        m["content"]
        for m in SessionMessage.objects.filter(run=run, kind="tool_result").values_list(
            "message", flat=True
        )
    ]
    # The question itself holds the identifier (it is the latest); the journal's record follows.
    assert f"[s:{stated}] user_input, run 1: The build id is build-7731" in results[0], results[0]
    assert results[1].startswith(f"[s:{stated}: characters 0 to")
    assert replay_run(run).ok


def test_the_latest_value_wins_and_records_past_the_watermark_stay_out(
    alice, gateway, make_demo_session
):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, "The port of service alpha is 8080.")
    ask(session, alice, "Correction: the port of service alpha is 9090.")
    found = _find(session, "port of service alpha")
    assert found.index(_seq_of(session, "9090")) < found.index(_seq_of(session, "is 8080"))
    query = SearchQuery.from_arguments({"query": "port of service alpha"})
    early = search_journal(session.pk, query, up_to=_seq_of(session, "is 8080"))
    assert [hit.ref for hit in early] == [f"s:{_seq_of(session, 'is 8080')}"]
    # The engine's store answers through the database slots like its other reads.
    assert {name for name in vars(RecordStore) if not name.startswith("_")} <= set(
        vars(SlottedStore)
    )


def test_the_index_holds_digests_only_never_text(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, "NONCE-CLEAR-77 lives at /opt/nonce/clear.txt")
    for digests in JournalTerms.objects.filter(session=session).values_list("digests", flat=True):
        assert digests and all(isinstance(d, int) and -(2**31) <= d < 2**31 for d in digests)
    # The same term digests differently in another session: rows cannot be linked across them.
    other = make_demo_session(tools=TOOLS)
    ask(other, alice, "NONCE-CLEAR-77 lives at /opt/nonce/clear.txt")
    (_, first), (_, second) = (encryption.search_keys(s.pk)[0] for s in (session, other))
    assert encryption.term_digests(first, ["nonce-clear-77"]) != encryption.term_digests(
        second, ["nonce-clear-77"]
    )


def test_key_rotation_keeps_search_working_during_and_after(
    alice, gateway, make_demo_session, settings, capsys
):
    settings.FIELD_ENCRYPTION_KEY = OLD_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, "NONCE-ROTATE-1 was stated before the rotation.")
    before = _find(session, "NONCE-ROTATE-1")
    assert before
    # During: the new key writes, the old one only reads; old rows still match.
    settings.FIELD_ENCRYPTION_KEY = NEW_KEY
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = [OLD_KEY]
    ask(session, alice, "NONCE-ROTATE-2 was stated during it.")
    assert _find(session, "NONCE-ROTATE-1")[:2] == before
    assert _find(session, "NONCE-ROTATE-2")[0] > before[0]
    keys = set(JournalTerms.objects.filter(session=session).values_list("key_id", flat=True))
    assert len(keys) == 2, "rows of both keys while the rotation has not run"
    call_command("rotate_encryption_key")
    assert "rebuilt" in capsys.readouterr().out
    # After: every row is under the new key, and the old key can go.
    settings.FIELD_ENCRYPTION_KEY_FALLBACKS = []
    new_id = encryption.search_keys(session.pk)[0][0]
    assert set(JournalTerms.objects.filter(session=session).values_list("key_id", flat=True)) == {
        new_id
    }
    assert _find(session, "NONCE-ROTATE-1")[:2] == before
    assert _find(session, "NONCE-ROTATE-2")[0] > before[0]


def test_index_journal_indexes_records_from_before_the_index_and_resumes(
    alice, gateway, make_demo_session
):
    session = make_demo_session(tools=TOOLS)
    for n in range(3):
        ask(session, alice, f"NONCE-OLD-{n} from before the index")
    JournalTerms.objects.filter(session=session).delete()
    assert _find(session, "NONCE-OLD-1") == []
    call_command("index_journal", "--batch-size", "2")
    assert _seq_of(session, "NONCE-OLD-1") in _find(session, "NONCE-OLD-1")
    count = JournalTerms.objects.filter(session=session).count()
    call_command("index_journal")
    assert JournalTerms.objects.filter(session=session).count() == count


def test_a_fork_is_indexed_under_its_own_key(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, "NONCE-FORKED fact")
    ask(session, alice, "NONCE-AFTER-FORK fact")
    fork = session_fork(user=alice, session=session, seq=_seq_of(session, "NONCE-FORKED"))
    assert _find(fork, "NONCE-FORKED") == [1]
    assert _find(fork, "NONCE-AFTER-FORK") in ([], [1])  # only a shared word, never the record
    assert (
        JournalTerms.objects.filter(session=fork).count()
        == SessionMessage.objects.filter(session=fork).exclude(kind="status").count()
    )
