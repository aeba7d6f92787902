"""Search of the session journal through its keyed index (`services.search_index`).

One query finds the candidates: the session's index rows (blocks of records) holding any of the
query's digests, under each configured field key, ranked by how many of the query's terms each
holds and then by recency; only the records of those blocks are decrypted, those that pass the
filters are kept, and `rank` orders them as `search_history` does (it drops a record that holds
no query term, and the whole query written in the record breaks ties). On PostgreSQL the digests
are an array under a GIN index; elsewhere a blob (or, in rows from before it, text) scanned with
`instr`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Q

from agentloom import encryption
from agentloom.engine import Hit, SearchQuery, rank, searchable_text, term_weight
from sessions_app.models import (
    MAIN_INSTANCE,
    JournalTerms,
    SessionMessage,
    digest_blob,
    digest_text,
)
from sessions_app.selectors.journal import JOURNAL_ITEM_FIELDS

# Candidates read per hit wanted: the index ranks by terms held, `rank` then by the whole query.
CANDIDATES_PER_HIT = 3


def search_journal(
    session_id: int, query: SearchQuery, *, up_to: int | None = None, main_only: bool = True
) -> list[Hit]:
    """Return the best journal records of the session for `query`, at most `query.limit`.

    `up_to`: only records with session seq <= it (an instance's inherited watermark);
    `main_only`: only the main instance's records (what `search_history` may read).
    """
    where = ["session_id = %s"]
    params: list[Any] = [session_id]
    if main_only:
        where.append("main = %s")
        params.append(True)
    if up_to is not None:
        where.append("seq <= %s")
        params.append(up_to)
    if query.kinds:
        where.append(f"(kind IN ({', '.join(['%s'] * len(query.kinds))}) OR kind = %s)")
        params.extend([*query.kinds, JournalTerms.MIXED_KINDS])
    if query.runs:
        where.append(f"run_number IN ({', '.join(['%s'] * len(query.runs))})")
        params.extend(query.runs)
    matches, match_params, score, score_params = [], [], [], []
    for key_id, key in encryption.search_keys(session_id):
        held = [_holds(digest) for digest in encryption.term_digests(key, list(query.terms))]
        matches.append(f"(key_id = %s AND ({' OR '.join(sql for sql, _ in held)}))")
        match_params += [key_id, *(param for _, sql_params in held for param in sql_params)]
        # Weighted as `rank` weighs them (a CJK pair half a word); the weights are our floats.
        count = " + ".join(
            f"{term_weight(term)} * CAST(({sql}) AS INTEGER)"
            for term, (sql, _) in zip(query.terms, held, strict=True)
        )
        score.append(f"WHEN key_id = %s THEN {count}")
        score_params += [key_id, *(param for _, sql_params in held for param in sql_params)]
    # Only fixed fragments and our table's name are joined; every value is a parameter.
    sql = (
        "SELECT seq, last_seq, run_number, main, "  # noqa: S608
        f"CASE {' '.join(score)} ELSE 0 END AS score "
        f"FROM {JournalTerms._meta.db_table} "
        f"WHERE {' AND '.join(where)} AND ({' OR '.join(matches)}) "
        "ORDER BY score DESC, COALESCE(last_seq, seq) DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [*score_params, *params, *match_params, query.limit * CANDIDATES_PER_HIT]
        )
        found = [row[:4] for row in cursor.fetchall()]
    hits = [
        Hit(f"s:{seq}", kind, run_number, searchable_text(message), (0, seq))
        for seq, kind, run_number, _instance, message in block_records(session_id, found)
        if isinstance(message, dict)
        and (up_to is None or seq <= up_to)
        and (not query.kinds or kind in query.kinds)
    ]
    return rank(query, hits)


Block = tuple[int, int | None, int, bool]  # seq, last_seq, run_number, main of an index row


def stands_for(block: Block, seq: int, run_number: int, instance: str) -> bool:
    """Return whether the index row `block` stands for the searchable record `seq` of run
    `run_number` and `instance`: in its range, of its run and its side."""
    first, last, run, main = block
    in_range = first <= seq <= (last or first)
    return in_range and run == run_number and main == (instance == MAIN_INSTANCE)


def block_records(session_id: int, blocks: Iterable[Block]) -> list[tuple[int, str, int, str, Any]]:
    """Return (seq, kind, run number, instance, message) of the searchable records that index
    rows stand for (`stands_for`), in seq order (one query)."""
    blocks = list(blocks)
    if not blocks:
        return []
    spans = Q()
    for seq, last_seq, _run, _main in blocks:
        spans |= Q(seq__gte=seq, seq__lte=last_seq or seq)
    rows = (
        SessionMessage.objects.filter(spans, session_id=session_id)
        .exclude(kind=SessionMessage.Kind.STATUS)
        .order_by("seq")
        .values_list("seq", "kind", "instance", "run__number", "message")
    )
    return [
        (seq, kind, run_number, instance, message)
        for seq, kind, instance, run_number, message in rows
        if any(stands_for(block, seq, run_number, instance) for block in blocks)
    ]


# The most records the console's journal search shows.
CONSOLE_HITS = 20


def journal_search(session_id: int, text: str, *, instance: str | None = None) -> list[dict]:
    """Return the journal items (as `journal_page` gives them) that best match `text`, best
    first, for the console's journal search: every instance's records, or `instance`'s.

    Raises ToolError when `text` has nothing to search for.
    """
    query = SearchQuery.from_arguments({"query": text, "limit": CONSOLE_HITS})
    hits = search_journal(session_id, query, main_only=instance == MAIN_INSTANCE)
    order = [int(hit.ref.removeprefix("s:")) for hit in hits]
    rows = SessionMessage.objects.filter(session_id=session_id, seq__in=order)
    if instance is not None:
        rows = rows.filter(instance=instance)
    items = {item["seq"]: item for item in rows.values(*JOURNAL_ITEM_FIELDS)}
    return [items[seq] for seq in order if seq in items]


def _holds(digest: int) -> tuple[str, list[Any]]:
    """Return the SQL that a row holds `digest`, with its parameters: on SQLite in either form
    of the column (a blob, or the text of rows from before it)."""
    if connection.vendor == "postgresql":
        return "digests @> ARRAY[%s]::integer[]", [digest]
    return (
        "(instr(digests, %s) > 0 OR instr(digests, %s) > 0)",
        [digest_blob([digest]), digest_text([digest])],
    )
