"""Search of the session journal through its keyed index (`services.search_index`).

One query finds the candidates: the session's index rows holding any of the query's digests,
under each configured field key, ranked by how many of the query's terms each holds and then
by recency; only those candidates are decrypted, and `rank` orders them as `search_history`
does (the whole query written in the record breaks ties). On PostgreSQL the digests are an
array under a GIN index; elsewhere a text column scanned with `instr`.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from agentloom import encryption
from agentloom.engine import Hit, SearchQuery, rank, searchable_text, term_weight
from sessions_app.models import MAIN_INSTANCE, JournalTerms, SessionMessage, digest_text
from sessions_app.selectors.journal import JOURNAL_ITEM_FIELDS, journal_messages

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
        where.append(f"kind IN ({', '.join(['%s'] * len(query.kinds))})")
        params.extend(query.kinds)
    if query.runs:
        where.append(f"run_number IN ({', '.join(['%s'] * len(query.runs))})")
        params.extend(query.runs)
    matches, match_params, score, score_params = [], [], [], []
    for key_id, key in encryption.search_keys(session_id):
        held = [_holds(digest) for digest in encryption.term_digests(key, list(query.terms))]
        matches.append(f"(key_id = %s AND ({' OR '.join(sql for sql, _ in held)}))")
        match_params += [key_id, *(param for _, param in held)]
        # Weighted as `rank` weighs them (a CJK pair half a word); the weights are our floats.
        count = " + ".join(
            f"{term_weight(term)} * CAST(({sql}) AS INTEGER)"
            for term, (sql, _) in zip(query.terms, held, strict=True)
        )
        score.append(f"WHEN key_id = %s THEN {count}")
        score_params += [key_id, *(param for _, param in held)]
    # Only fixed fragments and our table's name are joined; every value is a parameter.
    sql = (
        f"SELECT seq, run_number, kind, CASE {' '.join(score)} ELSE 0 END AS score "  # noqa: S608
        f"FROM {JournalTerms._meta.db_table} "
        f"WHERE {' AND '.join(where)} AND ({' OR '.join(matches)}) "
        "ORDER BY score DESC, seq DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [*score_params, *params, *match_params, query.limit * CANDIDATES_PER_HIT]
        )
        found = cursor.fetchall()
    messages = journal_messages(session_id, [seq for seq, *_ in found])
    hits = [
        Hit(f"s:{seq}", kind, run_number, searchable_text(messages[seq]), (0, seq))
        for seq, run_number, kind, _ in found
        if isinstance(messages.get(seq), dict)
    ]
    return rank(query, hits)


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


def _holds(digest: int) -> tuple[str, Any]:
    """Return the SQL that a row holds `digest`, with its parameter."""
    if connection.vendor == "postgresql":
        return "digests @> ARRAY[%s]::integer[]", digest
    return "instr(digests, %s) > 0", digest_text([digest])
