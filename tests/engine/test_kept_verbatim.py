"""Compaction version 2: a summary keeps the identifiers of what it replaces and cites its sources.

Before a summary is accepted, the identifiers of the records it replaces that it lost are appended
verbatim with their record references, within the summary's room; the compactor cites the
records summarised; an identifier kept once keeps its reference through later compactions;
version 1 runs compact as before.
"""

from __future__ import annotations

import json
import re

from agentloom.engine import ContextPolicy, LargeRecords, ModelBudget
from agentloom.engine._compaction import (
    READ_BACK_NOTE,
    SECTIONED_INSTRUCTIONS,
    SOURCES_HEADER,
    SUMMARY_INSTRUCTIONS,
)
from agentloom.engine._identifiers import KEPT_HEADER
from agentloom.engine._large import parse_ref
from agentloom.engine.testing import text_response
from tests.engine.helpers import add_group, new_context

SMALL = ModelBudget(8_000, 1_000, 0)  # effective 7,000; trigger 5,600; target 4,200
_LINE = re.compile(r"^- (.+?) \((r1:\d+)\): ")


def _summary(context) -> str:
    (summary,) = [
        m["content"]
        for m in context.frame.messages
        if m.get("role") == "user" and m["content"].startswith("[handoff summary]")
    ]
    return summary


def _record(context, ref: str) -> str:
    seq = parse_ref(ref)["seq"]
    (record,) = [r for r in context.frame.records if r.seq == seq]
    return record.message["content"]


def _deploys(context, first: int, last: int) -> None:
    for n in range(first, last):
        add_group(context, [f"deploy {n} wrote /srv/app/build-{n}.tar.gz in 3.{n} s " + "z" * 750])


def _compact(context, reply: str = "short summary", requests: list | None = None):
    def summarise(request):
        if requests is not None:
            requests.append(request)
        return text_response(reply)

    return context.prepare("action", tools=[], call_model=summarise).compaction


def test_identifiers_a_summary_lost_are_appended_with_references_that_resolve():
    context = new_context(budget=SMALL)
    _deploys(context, 0, 10)
    outcome = _compact(context, "short summary; /srv/app/build-0.tar.gz was written")
    assert outcome.succeeded and outcome.after < ContextPolicy().trigger_at(SMALL)
    summary = _summary(context)
    _, section = summary.split(KEPT_HEADER)
    lines = [_LINE.match(line) for line in section.strip().splitlines()]
    kept = [(m[1], m[2]) for m in lines if m]
    assert kept
    # Each citation names the record the identifier came from.
    assert all(identifier in _record(context, ref) for identifier, ref in kept)
    paths = [identifier for identifier, _ in kept if identifier.startswith("/srv/")]
    # The latest first; one the summary already holds is not repeated.
    assert paths[0] == "/srv/app/build-6.tar.gz"
    assert "/srv/app/build-0.tar.gz" not in paths
    row = context.frame.state.compaction_log[-1]
    assert row["identifiers"]["kept"] >= 1
    assert row["identifiers"]["added"] == len(kept) <= row["identifiers"]["found"]
    # The compactor cites the records summarised, as ranges of references.
    assert summary.rstrip().endswith(f"{SOURCES_HEADER}r1:2–15")
    assert READ_BACK_NOTE not in summary  # no read_record without a large-record policy


def test_the_summary_request_asks_for_sections_and_version_1_keeps_its_prompt():
    requests: list = []
    two = new_context(budget=SMALL)
    _deploys(two, 0, 10)
    _compact(two, requests=requests)
    assert requests[0].messages[0]["content"].startswith(SECTIONED_INSTRUCTIONS)
    requests.clear()
    one = new_context(budget=SMALL, compaction=1)
    _deploys(one, 0, 10)
    outcome = _compact(one, requests=requests)
    assert outcome.succeeded
    assert requests[0].messages[0]["content"].startswith(SUMMARY_INSTRUCTIONS)
    summary = _summary(one)
    assert KEPT_HEADER not in summary and SOURCES_HEADER not in summary
    assert "identifiers" not in one.frame.state.compaction_log[-1]


def test_a_summary_that_fills_its_room_still_succeeds_without_the_section():
    context = new_context(budget=SMALL)
    _deploys(context, 0, 10)
    outcome = _compact(context, "a long summary " + "y" * 40_000)
    assert outcome.succeeded
    assert outcome.after < ContextPolicy().trigger_at(SMALL)
    assert KEPT_HEADER not in _summary(context)
    assert context.frame.state.compaction_log[-1]["identifiers"]["added"] == 0


def test_an_identifier_kept_once_keeps_its_reference_through_the_next_compaction():
    context = new_context(budget=SMALL)
    add_group(context, ["the key file is /srv/keep/me.txt " + "z" * 750])
    for n in range(1, 10):
        add_group(context, [f"step {n} " + "z" * 780])
    assert _compact(context).succeeded
    first = _summary(context)
    assert "- /srv/keep/me.txt (r1:3): " in first
    for n in range(10, 18):
        add_group(context, [f"step {n} " + "z" * 780])
    # The next summary drops it again; the check puts it back with the same reference.
    outcome = _compact(context, "an even shorter summary")
    assert outcome.succeeded and len(context.frame.compactions) == 2
    second = _summary(context)
    assert "- /srv/keep/me.txt (r1:3): " in second
    assert second.count(SOURCES_HEADER) == 1


def test_the_citation_names_read_record_only_where_the_version_offers_it():
    policy = ContextPolicy(context_ratio=0.8, target_ratio=0.6)
    context = new_context(policy, ModelBudget(6_144, 512, 256), large_records=LargeRecords())
    for n in range(4):
        add_group(context, [f"NONCE-{n}-a /srv/data/part-{n}.csv " + "r" * 500])
        context.add_feedback("note " + "w" * 2_000)
    assert _compact(context, "the summary").succeeded
    summary = _summary(context)
    assert READ_BACK_NOTE in summary
    # What it cites is read back whole by the tool it names.
    refs = re.findall(r"\((r1:\d+)\): ", summary)
    assert refs and all(context.read_record(ref) for ref in refs)
    plain = new_context(budget=SMALL)
    _deploys(plain, 0, 10)
    _compact(plain)
    assert READ_BACK_NOTE not in _summary(plain)


def test_a_section_longer_in_tokens_than_in_characters_is_shrunk_to_its_room():
    # Chinese text takes more of the budget's units than characters: the section is measured as
    # sent, and shrunk until the summary fits its room, not dropped.
    context = new_context(budget=SMALL)
    for n in range(10):
        add_group(
            context,
            [f"第{n}号服务器部署完成，用时 3.{n} 秒，路径 /srv/应用/包-{n}.tar.gz " + "字" * 260],
        )
    outcome = _compact(context)
    assert outcome.succeeded and not outcome.details["summary_cut"]
    summary = _summary(context)
    assert KEPT_HEADER in summary
    assert outcome.details["identifiers"]["added"] < outcome.details["identifiers"]["found"]
    # Within its room (compaction 7's, under the target), but for the citation after it.
    citation = summary[summary.index("\n\nSummarised records") :]
    cited = len(json.dumps(citation, ensure_ascii=False).encode()) - 2  # as the estimator counts
    assert outcome.after - cited < ContextPolicy().target_at(SMALL)


def test_the_demo_model_reads_and_writes_only_its_own_summary_lines():
    # What the compactor appends is the compactor's: the demo model neither copies it into its
    # next summary nor answers from it (it would echo the lines back into the journal).
    from agentloom.engine import LocalDemoGateway, ModelRequest
    from agentloom.engine._compaction import HANDOFF_HEADER, BudgetCompactionPolicy

    running = (
        "the deploy NONCE-D1 finished\n\n"
        f"{KEPT_HEADER}\n- /srv/app/build-6.tar.gz (r1:15): wrote /srv/app/build-6.tar.gz\n\n"
        f"{SOURCES_HEADER}r1:2–15"
    )
    messages = BudgetCompactionPolicy.summary_messages(running, "--- next item ---\nNONCE-D2 ok")
    reply = LocalDemoGateway().complete(ModelRequest(purpose="compaction", messages=messages))
    text = reply.message["content"]
    assert "NONCE-D1" in text and "NONCE-D2" in text
    assert "build-6" not in text and SOURCES_HEADER not in text
    summary = f"{HANDOFF_HEADER}\n{running}"
    view = [{"role": "user", "content": "and then?"}, {"role": "user", "content": summary}]
    answer = LocalDemoGateway().complete(ModelRequest(purpose="action", messages=view))
    assert "NONCE-D1" in answer.message["content"]
    assert "build-6" not in answer.message["content"]
