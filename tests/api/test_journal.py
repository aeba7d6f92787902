"""The session journal: a cursor over seq, optionally filtered by instance."""

from __future__ import annotations

import datetime
import json
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from agentloom import encryption
from sessions_app.models import SessionMessage
from sessions_app.selectors.journal import journal_page
from sessions_app.serializers import JournalPageSerializer
from tests.support.legacy_encryption import legacy_token, store_raw

pytestmark = pytest.mark.django_db


def _journal(session, run, count, *, child_every=3):
    """Write `count` records directly, every `child_every`-th in child instance 1.1."""
    now = timezone.now()
    rows = [
        SessionMessage(
            session=session,
            seq=seq,
            run=run,
            instance="1.1" if seq % child_every == 0 else "main",
            kind="assistant",
            entry_key=f"k{seq}",
            message={"role": "assistant", "content": f"NONCE-{seq}"},
            created_at=now,
        )
        for seq in range(1, count + 1)
    ]
    SessionMessage.objects.bulk_create(rows)
    return rows


def _url(session, query=""):
    return f"/api/v1/sessions/{session.pk}/messages{query}"


def _read_all(api, session, *, limit, instance=None):
    after, seen, pages = 0, [], 0
    while True:
        query = f"?after={after}&limit={limit}" + (f"&instance={instance}" if instance else "")
        page = api.get(_url(session, query)).json()
        pages += 1
        if not page["items"]:
            assert page["next_after"] == after
            return seen, pages
        assert len(page["items"]) <= limit
        seen.extend(page["items"])
        assert page["next_after"] == page["items"][-1]["seq"]
        after = page["next_after"]


def test_items_are_decrypted_records_in_seq_order(api, run):
    _journal(run.session, run, 4)
    body = api.get(_url(run.session)).json()
    assert [item["seq"] for item in body["items"]] == [1, 2, 3, 4]
    first = body["items"][0]
    assert set(first) == {"seq", "run_id", "instance", "kind", "message", "created_at"}
    assert (first["run_id"], first["instance"], first["kind"]) == (run.pk, "main", "assistant")
    assert first["message"] == {"role": "assistant", "content": "NONCE-1"}
    assert body["items"][2]["instance"] == "1.1"
    assert body["next_after"] == 4


@pytest.mark.parametrize(("zone", "offset"), [("UTC", "Z"), ("Europe/Paris", "+01:00")])
def test_a_page_reads_as_its_serializer_writes_it(api, run, settings, zone, offset):
    # The page is written without a serializer per record; its schema's serializer would write
    # exactly the same, moments included (microseconds, in the site's time zone).
    settings.TIME_ZONE = zone
    _journal(run.session, run, 7)
    SessionMessage.objects.update(
        created_at=datetime.datetime(2026, 12, 2, 4, 5, 6, 789, datetime.UTC)
    )
    page = journal_page(session=run.session, after=2, limit=4)
    body = api.get(_url(run.session, "?after=2&limit=4")).content
    assert body == JSONRenderer().render(JournalPageSerializer(page).data)
    assert json.loads(body)["items"][0]["created_at"].endswith(f".000789{offset}")


# Messages whose JSON text the page copies as stored: characters JSON escapes, characters it
# does not, the two the renderer escapes for JavaScript, an empty value and a compressed one.
STORED_AS_IS = [
    {"role": "user", "content": 'quote " backslash \\ tab \t newline \n control \x01'},
    {"role": "assistant", "content": "caf\u00e9 \u4e2d\u6587 \U0001f600", "tool_calls": []},
    {"role": "tool", "tool_call_id": "c1", "content": "line\u2028separator\u2029paragraph"},
    {},
    {"role": "tool", "tool_call_id": "c2", "content": "NONCE-LONG " * 40, "n": [1.5, -2, None]},
]


def _stored_messages(session, run, messages, *, start=1):
    SessionMessage.objects.bulk_create(
        SessionMessage(
            session=session,
            seq=start + index,
            run=run,
            kind="assistant",
            entry_key=f"k{start + index}",
            message=message,
            created_at=timezone.now(),
        )
        for index, message in enumerate(messages)
    )


def test_a_page_copies_each_message_as_stored_and_reads_as_the_renderer_writes_it(
    api, run, monkeypatch
):
    _stored_messages(run.session, run, STORED_AS_IS)
    # Values stored by earlier versions: a Fernet token's base64 text and a legacy value.
    older = [{"role": "user", "content": "NONCE-BASE64 \u00e9"}, {"content": "NONCE-LEGACY"}]
    _stored_messages(run.session, run, older, start=len(STORED_AS_IS) + 1)
    rows = SessionMessage.objects.filter(seq__gt=len(STORED_AS_IS)).order_by("seq")
    base64_row, legacy_row = rows.values_list("pk", flat=True)
    # As the earlier version wrote it: the compact JSON text's token, in base64.
    text = json.dumps(older[0], ensure_ascii=False, separators=(",", ":")).encode()
    base64_token = encryption._primary().encrypt(text)
    store_raw(SessionMessage, base64_row, "message", base64_token)
    store_raw(SessionMessage, legacy_row, "message", legacy_token(older[1]))
    expected = JSONRenderer().render(JournalPageSerializer(journal_page(session=run.session)).data)

    def parsed(*args, **kwargs):
        raise AssertionError("a page parsed a message it could copy")

    # The current forms are copied: no message is decrypted into a value, nor parsed again.
    monkeypatch.setattr(SessionMessage._meta.get_field("message"), "from_db_value", parsed)
    unparsed = SimpleNamespace(loads=parsed, dumps=json.dumps)
    monkeypatch.setattr("sessions_app.serializers.json", unparsed)
    body = api.get(_url(run.session)).content
    assert body == expected
    assert b"\\u2028" in body and "\u00e9".encode() in body
    assert [item["message"] for item in json.loads(body)["items"]] == STORED_AS_IS + older


def test_a_message_with_a_lone_surrogate_is_written_escaped(api, run):
    _stored_messages(run.session, run, [{"content": "NONCE-\ud800-end"}, {"content": "ok"}])
    response = api.get(_url(run.session))
    assert response.status_code == 200
    assert b'"NONCE-\\ud800-end"' in response.content
    assert json.loads(response.content)["items"][1]["message"] == {"content": "ok"}


def test_an_indented_page_is_written_by_the_renderer(api, run):
    _stored_messages(run.session, run, STORED_AS_IS[:2])
    response = api.get(_url(run.session), HTTP_ACCEPT="application/json; indent=2")
    assert response.content.startswith(b'{\n  "items": [')
    assert [item["message"] for item in response.json()["items"]] == STORED_AS_IS[:2]


def test_an_assistant_record_returns_its_reasoning_kept_only_encrypted(api, run):
    message = {"role": "assistant", "content": "answer", "reasoning_content": "NONCE-THOUGHT"}
    SessionMessage.objects.create(
        session=run.session,
        seq=1,
        run=run,
        kind="assistant",
        entry_key="assistant:1",
        message=message,
        created_at=timezone.now(),
    )
    item = api.get(_url(run.session)).json()["items"][0]
    assert item["message"] == message
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM sessions_app_sessionmessage")
        stored = " ".join(str(value) for row in cursor.fetchall() for value in row)
    assert "NONCE-THOUGHT" not in stored


def test_paging_a_thousand_records_returns_each_once_in_order(api, run):
    rows = _journal(run.session, run, 1_000)
    seen, pages = _read_all(api, run.session, limit=37)
    assert [item["seq"] for item in seen] == list(range(1, 1_001))
    assert pages == 1_000 // 37 + 2  # full pages, the last partial one, then the empty one
    assert [item["message"]["content"] for item in seen] == [r.message["content"] for r in rows]


@pytest.mark.parametrize("instance", ["main", "1.1"])
def test_paging_with_an_instance_filter(api, run, instance):
    _journal(run.session, run, 1_000)
    seen, _ = _read_all(api, run.session, limit=37, instance=instance)
    expected = [seq for seq in range(1, 1_001) if (seq % 3 == 0) == (instance == "1.1")]
    assert [item["seq"] for item in seen] == expected
    assert {item["instance"] for item in seen} == {instance}


def test_defaults_are_after_0_and_limit_100(api, run):
    _journal(run.session, run, 150)
    body = api.get(_url(run.session)).json()
    assert [item["seq"] for item in body["items"]] == list(range(1, 101))
    assert body["next_after"] == 100
    assert len(api.get(_url(run.session, "?limit=200")).json()["items"]) == 150


def test_an_empty_page_keeps_the_cursor(api, run):
    _journal(run.session, run, 5)
    assert api.get(_url(run.session, "?after=5")).json() == {"items": [], "next_after": 5}
    assert api.get(_url(run.session, "?after=900")).json() == {"items": [], "next_after": 900}


@pytest.mark.parametrize(
    "after", ["9223372036854775807", "9223372036854775808", "99999999999999999999", "9" * 5000]
)
def test_an_after_beyond_any_seq_is_an_empty_page(api, run, after):
    _journal(run.session, run, 5)
    response = api.get(_url(run.session, f"?after={after}"))
    assert response.status_code == 200, response.content
    # However large, the cursor reads as the largest seq there can be.
    assert response.json() == {"items": [], "next_after": 2**63 - 1}


def test_a_well_formed_unknown_instance_is_an_empty_page(api, run):
    _journal(run.session, run, 5)
    body = api.get(_url(run.session, "?instance=7.3&after=2")).json()
    assert body == {"items": [], "next_after": 2}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?after=-1", "after"),
        ("?after=abc", "after"),
        ("?after=1.5", "after"),
        ("?after=", "after"),
        ("?limit=0", "limit"),
        ("?limit=201", "limit"),
        ("?limit=-5", "limit"),
        ("?limit=ten", "limit"),
        ("?limit=", "limit"),
        ("?instance=", "instance"),
        ("?instance=1", "instance"),
        ("?instance=1.", "instance"),
        ("?instance=.1", "instance"),
        ("?instance=1.1.1", "instance"),
        ("?instance=MAIN", "instance"),
        ("?instance=main2", "instance"),
        ("?instance=1.1%0A", "instance"),
        ("?instance=%EF%BC%91.%EF%BC%91", "instance"),  # full-width digits
        ("?instance=1.a", "instance"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(api, run, query, field):
    response = api.get(_url(run.session, query))
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_reading_a_page_is_one_journal_query(api, run):
    _journal(run.session, run, 50)
    api.get(_url(run.session))  # warm the token lookup path
    with CaptureQueriesContext(connection) as queries:
        assert api.get(_url(run.session, "?after=10&limit=20&instance=main")).status_code == 200
    journal = [
        q["sql"] for q in queries.captured_queries if "sessions_app_sessionmessage" in q["sql"]
    ]
    assert len(journal) == 1
    # Token, session, journal: nothing per record.
    assert len(queries.captured_queries) == 3


@pytest.mark.parametrize("instance", [None, "main"])
def test_the_journal_query_walks_an_index_in_seq_order(api, run, instance):
    _journal(run.session, run, 50)
    query = "?after=10&limit=20" + (f"&instance={instance}" if instance else "")
    with CaptureQueriesContext(connection) as queries:
        api.get(_url(run.session, query))
    (sql,) = [q["sql"] for q in queries.captured_queries if "sessionmessage" in q["sql"]]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        else:
            # A small table is scanned whatever its indexes; ask whether a plain index scan can
            # serve the query in seq order.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute(f"EXPLAIN {sql}")
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "INDEX" in plan.upper()
    assert "TEMP B-TREE" not in plan and "Sort" not in plan
