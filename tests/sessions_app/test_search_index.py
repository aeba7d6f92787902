"""The journal's keyed search index: written with every record, searched by `search_history` and
the console, rebuilt on key rotation, gone with its session, never holding text."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection

from agentloom import encryption
from agentloom.engine import Checkpoint, InstanceFrame, Record, RecordStore, SearchQuery
from sessions_app.models import JournalTerms, Run, SessionMessage, digest_text
from sessions_app.selectors.search import search_journal
from sessions_app.services import journal
from sessions_app.services.execution import SlottedStore
from sessions_app.services.fork import session_fork
from sessions_app.services.journal import JournalWriter
from sessions_app.services.replay import replay_run
from sessions_app.services.search_index import index_records, record_digests
from tests.factories import ask, make_run

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


def _indexed(session) -> set[int]:
    """Return the seqs that the session's index rows stand for (a row: `seq` to `last_seq`)."""
    spans = JournalTerms.objects.filter(session=session).values_list("seq", "last_seq")
    return {seq for first, last in spans for seq in range(first, (last or first) + 1)}


def test_every_searchable_record_is_indexed_as_it_is_journaled(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, '/tool echo {"text": "NONCE-ECHOED at /srv/app/config.toml"}')
    rows = SessionMessage.objects.filter(session=session)
    searchable = set(rows.exclude(kind="status").values_list("seq", flat=True))
    assert _indexed(session) == searchable and searchable
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


def test_an_ended_run_is_one_block_holding_each_digest_once(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, '/tool echo {"text": "NONCE-BLOCK-5 in /srv/block.toml"}')
    records = SessionMessage.objects.filter(session=session).exclude(kind="status")
    seqs = sorted(records.values_list("seq", flat=True))
    (block,) = JournalTerms.objects.filter(session=session)
    # The question, the call, the result and the answer: one row, first to last, mixed kinds.
    assert (block.seq, block.last_seq, block.kind) == (seqs[0], seqs[-1], "")
    key = encryption.search_keys(session.pk)[0][1]
    union = set().union(*(record_digests(key, r.message) for r in records))
    assert block.digests == sorted(union)
    assert len(block.digests) < sum(len(record_digests(key, r.message)) for r in records)
    # A later run's records start a block of their own.
    ask(session, alice, "NONCE-BLOCK-6 comes later")
    assert JournalTerms.objects.filter(session=session).count() == 2


def test_a_writer_fills_its_blocks_save_by_save_and_keeps_them_only_once_committed(
    alice, make_demo_session, monkeypatch
):
    session = make_demo_session()
    run = make_run(session, status="running", number=1)
    writer = JournalWriter(run, lease_owner=None)
    frame = InstanceFrame(instance="main", messages=[{"role": "system", "content": "s"}])

    def save(n: int) -> None:
        message = {"role": "assistant", "content": f"NONCE-STEP-{n} said"}
        frame.add_record(
            Record(n, "assistant", message, f"assistant:{n}", "2026-12-07T00:00:00+00:00")
        )
        frame.show(message, {"own": n})
        writer.sync(Checkpoint.of(frame))
        frame.mark_saved()

    for n in range(1, 9):
        save(n)
        # Found from the save that journals it, in the one block the saves extend.
        assert _find(session, f"NONCE-STEP-{n}")[0] == n
        assert list(
            JournalTerms.objects.filter(session=session).values_list("seq", "last_seq")
        ) == [(1, n if n > 1 else None)]
    # A save that rolls back leaves the writer's blocks as they were before it.
    real = journal.snapshot_save

    def failing(**kwargs):
        raise DatabaseError("NONCE-ROLLBACK")

    monkeypatch.setattr(journal, "snapshot_save", failing)
    with pytest.raises(DatabaseError):
        save(9)
    monkeypatch.setattr(journal, "snapshot_save", real)
    writer.sync(Checkpoint.of(frame))
    frame.mark_saved()
    save(10)
    # The ninth record started a block: the first holds eight.
    assert list(JournalTerms.objects.filter(session=session).values_list("seq", "last_seq")) == [
        (1, 8),
        (9, 10),
    ]
    assert [_find(session, f"NONCE-STEP-{n}")[0] for n in (8, 9, 10)] == [8, 9, 10]


def test_a_search_filters_the_records_of_a_block_one_by_one(alice, gateway, make_demo_session):
    session = make_demo_session(tools=TOOLS)
    ask(session, alice, '/tool echo {"text": "NONCE-FILTER-9"}')
    ask(session, alice, "something else entirely")
    question, result = (
        SessionMessage.objects.filter(session=session, run__number=1, kind=kind).get().seq
        for kind in ("user_input", "tool_result")
    )
    assert {question, result} <= set(_find(session, "NONCE-FILTER-9"))
    assert _find(session, "NONCE-FILTER-9", kinds=["tool_result"]) == [result]
    assert _find(session, "NONCE-FILTER-9", kinds=["user_input"]) == [question]
    assert _find(session, "NONCE-FILTER-9", runs=[2]) == []
    query = SearchQuery.from_arguments({"query": "NONCE-FILTER-9"})
    # A watermark inside the block keeps the records after it out.
    assert [hit.ref for hit in search_journal(session.pk, query, up_to=question)] == [
        f"s:{question}"
    ]
    # The second run's block holds none of the term: nothing of it is read as a hit.
    assert not set(_find(session, "something else entirely")) & {question, result}
    # Blocks past the watermark are never read in place of the ones before it.
    for _ in range(3):
        ask(session, alice, "NONCE-FILTER-9 is stated again")
    assert [
        hit.ref
        for hit in search_journal(
            session.pk,
            SearchQuery.from_arguments({"query": "NONCE-FILTER-9", "limit": 1}),
            up_to=result,
        )
    ] == [f"s:{result}"]


def test_a_block_stands_for_one_side_of_its_run(alice, gateway, make_demo_session):
    session = make_demo_session(
        tools=TOOLS,
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}
        ],
    )
    ask(
        session,
        alice,
        'NONCE-SIDE-3 first\n/tool delegate_helper {"task": "/tool echo {\\"text\\": '
        '\\"NONCE-SIDE-3 kid\\"}"}',
    )
    rows = SessionMessage.objects.filter(session=session).exclude(kind="status")
    child = set(rows.exclude(instance="main").values_list("seq", flat=True))
    main = set(rows.filter(instance="main").values_list("seq", flat=True))
    # The main instance's block spans the child's records, which are a block of their own.
    blocks = JournalTerms.objects.filter(session=session)
    assert {(row.main, row.seq) for row in blocks} == {(True, min(main)), (False, min(child))}
    assert min(main) < min(child) < max(main)
    query = SearchQuery.from_arguments({"query": "NONCE-SIDE-3"})
    assert {int(hit.ref[2:]) for hit in search_journal(session.pk, query)} <= main
    assert set(_find(session, "NONCE-SIDE-3")) & child


def test_index_journal_merges_rows_of_one_record_and_old_forms_still_match(
    alice, gateway, make_demo_session
):
    session = make_demo_session(tools=TOOLS)
    for n in range(2):
        ask(session, alice, f'/tool echo {{"text": "NONCE-MERGE-{n}"}}')
    # The form earlier versions left: a row per record (and hex text on SQLite).
    JournalTerms.objects.filter(session=session).delete()
    for row in SessionMessage.objects.filter(session=session).order_by("seq"):
        index_records([row])
    singles = JournalTerms.objects.filter(session=session).count()
    assert singles == len(_indexed(session)) == 8
    if connection.vendor == "sqlite":
        for seq, digests in JournalTerms.objects.filter(session=session).values_list(
            "seq", "digests"
        ):
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE sessions_app_journalterms SET digests = %s "
                    "WHERE session_id = %s AND seq = %s",
                    [digest_text(digests), session.pk, seq],
                )
    old = {n: _find(session, f"NONCE-MERGE-{n}") for n in range(2)}
    assert all(len(found) >= 3 for found in old.values())
    call_command("index_journal", "--batch-size", "3")
    # Every record still found as before, from one block a run.
    assert JournalTerms.objects.filter(session=session).count() < singles
    assert _indexed(session) == set(
        SessionMessage.objects.filter(session=session)
        .exclude(kind="status")
        .values_list("seq", flat=True)
    )
    assert {n: _find(session, f"NONCE-MERGE-{n}") for n in range(2)} == old
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT DISTINCT typeof(digests) FROM sessions_app_journalterms")
            assert cursor.fetchall() == [("blob",)]
    rows = list(JournalTerms.objects.filter(session=session).values_list("seq", "last_seq"))
    call_command("index_journal")
    assert list(JournalTerms.objects.filter(session=session).values_list("seq", "last_seq")) == rows
