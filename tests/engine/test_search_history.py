"""`search_history`: what an instance may search, how hits rank, and what the result says.

The memory journal's store answers the journal part by scanning with the same `rank` the app's
keyed index feeds (tests/sessions_app/test_search_index.py checks the index itself).
"""

from __future__ import annotations

import json

import pytest

from agentloom.engine import (
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    EngineConfig,
    Hit,
    JournalContextManager,
    LargeRecords,
    ModelBudget,
    ModelGateway,
    SearchQuery,
    ToolError,
    rank,
    record_terms,
)
from agentloom.engine._compaction import READ_BACK_NOTE, SEARCH_NOTE
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
from tests.engine.helpers import FakeClock, Recorder, add_group, make_engine, new_context

BUDGET = ModelBudget(32_000, 1_024, 512)


def _query(text: str, **arguments) -> SearchQuery:
    return SearchQuery.from_arguments({"query": text, **arguments})


def _refs(result: str) -> list[str]:
    return [line.split("]", 1)[0][1:] for line in result.splitlines() if line.startswith("[")]


def _run(journal: MemoryJournal, number: int, question: str, results=(), *, calls=()):
    """Run `number` of a session whose model calls `calls` (name, arguments) and answers."""
    recorder = Recorder(journal=journal, run_id=number)
    script = [tool_call_response(*calls)] if calls else []
    script.append(text_response(f"answer {number}"))

    class Gateway(ModelGateway):
        requests: list = []

        def complete(self, request):
            self.requests.append(request)
            return script.pop(0)

    gateway = Gateway()
    engine = make_engine(
        gateway,
        tools=("echo", "search_history"),
        budget=BUDGET,
        recorder=recorder,
        large_records={"share": 0.1},
        config=EngineConfig(record_store=recorder.store()),
    )
    history = journal.history() if journal.rows else None
    outcome = engine.start(
        run_number=number, attempt=1, system_prompt="sys", question=question, history=history
    )
    assert outcome.status == "succeeded", outcome.error
    return outcome, gateway


def _tool_results(outcome) -> list[str]:
    records = outcome.frame["context"]["records"]
    return [r["message"]["content"] for r in records if r["kind"] == "tool_result"]


def test_a_run_finds_an_earlier_runs_fact_by_identifier_with_its_reference():
    journal = MemoryJournal()
    _run(journal, 1, "The deploy id is build-7731 and the bucket is s3://nonce-bucket/logs.")
    outcome, gateway = _run(
        journal, 2, "Which build?", calls=[("search_history", {"query": "build-7731"})]
    )
    offered = [tool["function"]["name"] for tool in gateway.requests[0].tools]
    assert "search_history" in offered
    (result,) = _tool_results(outcome)
    # The record holding the identifier first; the question ("Which build?") shares a word only,
    # and the call that made the search is never a hit.
    assert _refs(result) == ["s:1", "r2:1"], result
    assert "build-7731" in result and "user_input, run 1" in result


def test_the_latest_value_of_a_fact_stated_twice_ranks_first():
    journal = MemoryJournal()
    _run(journal, 1, "The port of service alpha is 8080.")
    _run(journal, 2, "Correction: the port of service alpha is 9090.")
    outcome, _ = _run(
        journal, 3, "port?", calls=[("search_history", {"query": "port of service alpha"})]
    )
    (result,) = _tool_results(outcome)
    lines = [line for line in result.splitlines() if line.startswith("[")]
    assert "9090" in lines[0] and "run 2" in lines[0], result
    assert "8080" in lines[1]


def test_an_update_worded_differently_still_ranks_first():
    journal = MemoryJournal()
    _run(journal, 1, "项目 alpha-east 的代码是 KX-1111-aaaa。请记住。")
    _run(journal, 2, "项目 alpha-west 的代码是 KY-2222-bbbb。")
    _run(journal, 3, "Update: the code of alpha-east is now KZ-3333-cccc.")
    outcome, _ = _run(journal, 4, "?", calls=[("search_history", {"query": "alpha-east 代码"})])
    (result,) = _tool_results(outcome)
    hits = [line for line in result.splitlines() if line.startswith("[")]
    # The Chinese statement holds one more (weak) term, the update is newer: the update first,
    # and the near-duplicate name, which holds less of the query, after both.
    assert "KZ-3333-cccc" in hits[0] and "KX-1111-aaaa" in hits[1], result
    assert "alpha-west" in hits[2]


def test_more_terms_matched_rank_above_recency():
    context = new_context(budget=BUDGET, task="alpha beta gamma in one place")
    add_group(context, ["alpha only here", "nothing relevant"])
    result = context.search_history(_query("alpha beta gamma"))
    assert _refs(result)[0] == "r1:1"  # the task holds all three terms; the result only one


def test_records_past_the_watermark_are_never_returned():
    journal = MemoryJournal()
    _run(journal, 1, "NONCE-EARLY is the first code.")
    history = journal.history()
    # Another run journals after this run's history was taken (a fork of time, a supplement
    # journaled at the end of a concurrent run): the search must not see it.
    _run(journal, 2, "NONCE-LATE is the second code.")
    context = JournalContextManager(
        ContextBinding(ContextPolicy(), BUDGET, large_records=LargeRecords()),
        ContextOptions(clock=FakeClock(), record_store=journal.store(3)),
    )
    context.create(
        instance="main", system_prompt="s", task="t", run_number=3, attempt=1, history=history
    )
    assert _refs(context.search_history(_query("NONCE-EARLY"))) == ["s:1"]
    # The later record holds every term of the query, and still is not found.
    assert "NONCE-LATE is" not in context.search_history(_query("NONCE-LATE"))


def test_a_sub_agent_searches_only_its_own_records():
    journal = MemoryJournal()
    _run(journal, 1, "The parent knows NONCE-PARENT.")
    child = JournalContextManager(
        ContextBinding(ContextPolicy(), BUDGET, large_records=LargeRecords()),
        ContextOptions(clock=FakeClock(), record_store=journal.store(2)),
    )
    # Even a child frame that names a watermark (children are made without one) reads nothing
    # of the session's journal: the rule is the instance's, not the watermark's.
    child.create(
        instance="2.1",
        system_prompt="sub",
        task="find NONCE-CHILD",
        run_number=2,
        attempt=1,
        history=journal.history(),
    )
    assert child.frame.inherited_watermark > 0
    found = _refs(child.search_history(_query("NONCE-CHILD")))
    assert found and all(ref.startswith("r2.1:") for ref in found)
    # Only its own task shares a word ("nonce"); the parent's record is never read.
    assert "parent knows" not in child.search_history(_query("NONCE-PARENT"))


def test_kinds_and_runs_filter_and_bad_arguments_are_tool_errors():
    journal = MemoryJournal()
    _run(journal, 1, "NONCE-F in a question", calls=[("echo", {"text": "NONCE-F in a result"})])
    _run(journal, 2, "NONCE-F again")
    outcome, _ = _run(
        journal,
        3,
        "q",
        calls=[
            ("search_history", {"query": "NONCE-F", "kinds": ["tool_result"]}),
            ("search_history", {"query": "NONCE-F", "runs": [2]}),
            ("search_history", {"query": "NONCE-F", "limit": 1}),
        ],
    )
    by_kind, by_run, one = _tool_results(outcome)
    assert "tool_result, run 1" in by_kind and "user_input" not in by_kind
    assert "run 2" in by_run and "run 1" not in by_run
    assert len(_refs(one)) == 1
    for arguments in (
        {"query": "  "},
        {"query": "x", "limit": 0},
        {"query": "x", "kinds": ["status"]},
    ):
        with pytest.raises(ToolError):
            SearchQuery.from_arguments(arguments)


def test_chinese_text_is_found_by_its_words_and_a_pasted_key_is_not_confirmed():
    context = new_context(budget=BUDGET, task="服务器部署在上海，端口是 8443。")
    key = "sk-proj-Q7aZ9xLm2NcV8bT4kR1wYp3D"
    add_group(context, [f"the key is {key}"])
    assert _refs(context.search_history(_query("上海"))) == ["r1:1"]
    assert "r1:1" in _refs(context.search_history(_query("部署")))
    # The key itself is never a term, of a record or of a query: only its harmless parts are.
    assert key.lower() not in record_terms({"role": "tool", "content": f"the key is {key}"})
    assert key.lower() not in SearchQuery.from_arguments({"query": key}).terms


def test_the_result_stays_within_the_large_record_limit():
    context = new_context(budget=ModelBudget(4_096, 512, 256), large_records=LargeRecords())
    add_group(context, [f"NONCE-BIG {n} " + "word " * 400 for n in range(20)])
    result = context.search_history(_query("NONCE-BIG", limit=20))
    assert context.sizer.size(result) <= context.sizer.limit
    assert 0 < len(_refs(result)) < 20
    # Under a large window all twenty fit, with their widest snippets.
    roomy = new_context(budget=ModelBudget(128_000, 4_096, 1_024), large_records=LargeRecords())
    add_group(roomy, [f"NONCE-BIG {n} " + "word " * 400 for n in range(20)])
    assert len(_refs(roomy.search_history(_query("NONCE-BIG", limit=20)))) == 20


def test_a_version_without_the_tool_is_not_offered_it():
    journal = MemoryJournal()
    recorder = Recorder(journal=journal)
    seen = []

    class Gateway(ModelGateway):
        def complete(self, request):
            seen.append([tool["function"]["name"] for tool in request.tools])
            return text_response("done")

    engine = make_engine(Gateway(), tools=("echo",), budget=BUDGET, recorder=recorder)
    engine.start(run_number=1, attempt=1, system_prompt="s", question="q")
    assert seen == [["echo"]]


def test_the_handoff_text_names_search_history_only_where_it_is_offered():
    def summary_of(tools):
        recorder = Recorder()

        class Gateway(ModelGateway):
            def complete(self, request):
                if request.purpose == "compaction":
                    return text_response("Goals: keep going. Decisions: none.")
                if len(recorder.saves) < 12:
                    return tool_call_response(("echo", {"text": "NONCE-R " + "z" * 1_500}))
                return text_response("done")

        engine = make_engine(
            Gateway(),
            tools=tools,
            budget=ModelBudget(6_144, 512, 256),
            recorder=recorder,
            large_records={"share": 0.1},
            compaction=3,
            config=EngineConfig(record_store=recorder.store()),
        )
        outcome = engine.start(run_number=1, attempt=1, system_prompt="s", question="go")
        assert any(c.purpose == "compaction" for c in recorder.calls), "it must compact"
        return json.dumps(outcome.frame["messages"])

    with_search = summary_of(("echo", "search_history"))
    without = summary_of(("echo",))
    assert json.dumps(SEARCH_NOTE)[1:-1] in with_search
    assert json.dumps(READ_BACK_NOTE)[1:-1] in without and "search_history" not in without


def test_a_record_is_ranked_by_its_terms_whatever_its_case_and_sigmas():
    query = SearchQuery.from_arguments({"query": "NONCE-CASE-4 ΟΔΟΣ"})
    texts = {
        1: "nonce-case-4 in lower case",
        # A capital sigma before a combining accent and a letter lowers to σ in the text, and
        # to ς in the word a term is made of.
        2: "ΟΔΟΣ\u0301α is the street",
        3: "nothing of either",
    }
    hits = rank(
        query, [Hit(f"s:{seq}", "user_input", 1, text, (0, seq)) for seq, text in texts.items()]
    )
    assert sorted(hit.ref for hit in hits) == ["s:1", "s:2"]
