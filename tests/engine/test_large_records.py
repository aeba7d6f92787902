"""Large records: excerpts with references, `read_record`, and masking before summaries.

Every engine run here saves through `Recorder`, so each save is also rebuilt from by-reference
storage and compared byte for byte: excerpts and masks survive the round trip.
"""

from __future__ import annotations

import json
import re

import pytest

from agentloom.engine import (
    ContextBinding,
    ContextOptions,
    ContextPolicy,
    EngineConfig,
    InstanceFrame,
    JournalContextManager,
    JsonBytesEstimator,
    LargeRecords,
    ModelBudget,
    ModelGateway,
    ToolError,
)
from agentloom.engine._large import READ_MAX_CHARS, RecordSizer, excerpt, parse_ref
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
from tests.engine.helpers import FakeClock, Recorder, add_group, make_engine, new_context

DEMO_BUDGET = ModelBudget(6_144, 512, 256)
LARGE = {"share": 0.1}
_REF = re.compile(r'read_record\(ref="([^"]+)"(?:, offset=(\d+))?')


class ReadingGateway(ModelGateway):
    """Calls `big_output`, then reads the excerpt's reference back `reads` times, then answers."""

    def __init__(self, chars: int = 30_000, reads: int = 1):
        self.chars = chars
        self.reads = reads
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        if request.purpose == "compaction":
            return text_response("summary of the earlier work")
        last = request.messages[-1]
        if last.get("role") != "tool":
            return tool_call_response(("big_output", {"chars": self.chars}))
        found = _REF.search(last["content"])
        if found and self.reads:
            self.reads -= 1
            offset = int(found[2] or 0)
            return tool_call_response(("read_record", {"ref": found[1], "offset": offset}))
        return text_response("done")


def _tool_names(request) -> list[str]:
    return [tool["function"]["name"] for tool in request.tools]


def test_a_large_tool_result_is_an_excerpt_the_model_reads_back():
    recorder = Recorder()
    gateway = ReadingGateway()
    engine = make_engine(
        gateway,
        tools=("big_output",),
        budget=DEMO_BUDGET,
        recorder=recorder,
        large_records=LARGE,
        config=EngineConfig(record_store=recorder.store()),
    )
    outcome = engine.start(run_number=3, attempt=1, system_prompt="sys", question="go")
    assert outcome.status == "succeeded", outcome.error
    effective = DEMO_BUDGET.effective_input_budget
    assert all(call.request_estimate <= effective for call in recorder.calls)
    frame = outcome.frame
    # The record keeps all 30,000 characters; the view shows an excerpt naming it.
    results = [r for r in frame["context"]["records"] if r["kind"] == "tool_result"]
    assert len(results[0]["message"]["content"]) == 30_000
    shown = [m for m in frame["messages"] if m.get("role") == "tool"]
    assert 'read_record(ref="r3:3"' in shown[0]["content"]
    assert len(shown[0]["content"]) < 30_000
    limit = LargeRecords(0.1).limit(DEMO_BUDGET)
    sizer = RecordSizer(limit, JsonBytesEstimator())
    assert sizer.size(shown[0]["content"]) <= limit
    # The read returns the characters after the head, within the same limit.
    read = shown[1]["content"]
    assert read.startswith("[r3:3: characters ")
    assert sizer.size(read) <= limit
    # `read_record` is offered from the first request on, the same tools every time.
    assert all(_tool_names(r) == ["big_output", "read_record"] for r in gateway.requests)


def test_under_rendering_3_read_record_is_offered_once_the_view_holds_a_reference():
    gateway = ReadingGateway()
    engine = make_engine(
        gateway,
        tools=("big_output",),
        budget=DEMO_BUDGET,
        large_records=LARGE,
        rendering=3,
    )
    outcome = engine.start(run_number=3, attempt=1, system_prompt="sys", question="go")
    assert outcome.status == "succeeded", outcome.error
    assert "read_record" not in _tool_names(gateway.requests[0])
    assert "read_record" in _tool_names(gateway.requests[1])


class ManyResults(ModelGateway):
    """Calls `big_output` `calls` times (results of 400 characters: none large), then answers."""

    def __init__(self, calls: int = 16):
        self.calls = calls
        self.steps = 0
        self.requests = []

    def complete(self, request):
        if request.purpose == "compaction":
            return text_response("summary")
        self.requests.append(request)
        self.steps += 1
        if self.steps <= self.calls:
            return tool_call_response(("big_output", {"chars": 400}))
        return text_response("done")


def _after_first_masking(rendering: int | None):
    """Run a masking session; return its action requests, the first one after the masking and
    the masking's log row."""
    gateway = ManyResults()
    recorder = Recorder()
    engine = make_engine(
        gateway,
        tools=("big_output",),
        budget=DEMO_BUDGET,
        recorder=recorder,
        large_records=LARGE,
        config=EngineConfig(record_store=recorder.store()),
        rendering=rendering,
    )
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="go")
    assert outcome.status == "succeeded", outcome.error
    masked = [
        r for r in gateway.requests if any("hidden to save room" in str(m) for m in r.messages)
    ]
    assert masked, "the session was meant to mask older results"
    log = outcome.frame["state"]["compaction_log"]
    row = next(row for row in log if row.get("stage") == "masking")
    return gateway.requests, masked[0], row


def test_the_first_request_after_a_masking_offers_read_record_and_was_measured_with_it():
    requests, first, row = _after_first_masking(None)
    # The stubs say `read_record(ref=…) shows it again`: the request that shows them offers it.
    assert "read_record" in _tool_names(first)
    # The masking's success check measured the view with the schema the request carries.
    measured = ContextPolicy().measure(first.messages, first.tools, JsonBytesEstimator())
    assert row["after"] == measured
    # The tools never change within the run (the provider's prompt cache keeps its prefix).
    assert all(r.tools == requests[0].tools for r in requests)


def test_under_rendering_3_the_request_after_a_masking_keeps_its_old_tools():
    _, first, _ = _after_first_masking(3)
    assert "read_record" not in _tool_names(first)


def test_reading_a_record_in_slices_returns_all_of_it():
    text = "".join(f"line {n:05d}\n" for n in range(3_000))
    context = new_context(budget=DEMO_BUDGET, large_records=LargeRecords())
    add_group(context, [text])
    ref = "r1:3"
    assert ref in context.frame.messages[-1]["content"]
    pieces, offset = [], 0
    while True:
        result = context.read_record(ref, offset)
        header, body = result.split("\n", 1)
        pieces.append(body)
        offset += len(body)
        if "this is the end" in header:
            break
    assert "".join(pieces) == text
    assert len(pieces) > 3, "each read is held to the large-record limit"


def test_a_read_is_at_most_24000_characters_even_on_a_huge_budget():
    budget = ModelBudget(1_000_000, 4_096, 1_024)
    context = new_context(budget=budget, large_records=LargeRecords())
    add_group(context, ["x" * 100_000])
    result = context.read_record("r1:3", 0, 50_000)
    assert len(result.split("\n", 1)[1]) == READ_MAX_CHARS
    assert len(context.read_record("r1:3", 10, 5).split("\n", 1)[1]) == 5


def test_unknown_malformed_and_other_instances_records_are_refused():
    context = new_context(budget=DEMO_BUDGET, large_records=LargeRecords())
    add_group(context, ["y" * 40_000])
    for ref in ("r1:99", "r2:3", "r1.1:1", "s:1", "nonsense", "r1:"):
        with pytest.raises(ToolError):
            context.read_record(ref)
    with pytest.raises(ToolError):
        context.read_record("r1:3", 40_001)
    child = JournalContextManager(
        ContextBinding(ContextPolicy(), DEMO_BUDGET, large_records=LargeRecords()),
        ContextOptions(clock=FakeClock()),
    )
    child.create(instance="1.1", system_prompt="sub", task="sub task", run_number=1, attempt=1)
    add_group(child, ["z" * 40_000])
    assert child.read_record("r1.1:3").startswith("[r1.1:3:")
    with pytest.raises(ToolError):
        child.read_record("r1:3")  # the parent's record is not the child's to read
    assert parse_ref(" s:12 ") == {"s": 12}
    assert parse_ref("r4.2:7") == {"run": 4, "instance": "4.2", "seq": 7}


class _BadReads(ModelGateway):
    def __init__(self):
        self.steps = [
            tool_call_response(("read_record", {"ref": "r9:1"})),
            tool_call_response(("read_record", {"ref": "not a ref"})),
            text_response("done"),
        ]

    def complete(self, request):
        return self.steps.pop(0)


def test_a_bad_reference_is_feedback_not_a_crash():
    recorder = Recorder()
    engine = make_engine(
        _BadReads(),
        tools=(),
        recorder=recorder,
        large_records=LARGE,
        config=EngineConfig(record_store=recorder.store()),
    )
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="go")
    assert outcome.status == "succeeded"
    records = outcome.frame["context"]["records"]
    results = [r["message"]["content"] for r in records if r["kind"] == "tool_result"]
    assert all(text.startswith("ERROR: ") for text in results)
    feedback = [r["message"]["content"] for r in records if r["kind"] == "feedback"]
    assert len(feedback) == 2 and "read_record" in feedback[0]


def test_versions_without_the_policy_keep_the_truncation_and_no_reader():
    recorder = Recorder()
    gateway = ReadingGateway()
    budget = ModelBudget(200_000, 4_096, 1_024)
    engine = make_engine(gateway, tools=("big_output",), budget=budget, recorder=recorder)
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="go")
    shown = [m for m in outcome.frame["messages"] if m.get("role") == "tool"]
    assert "[truncated: 6000 characters cut" in shown[0]["content"]
    assert all("read_record" not in _tool_names(r) for r in gateway.requests)


def test_history_records_are_excerpted_and_read_from_the_journal():
    journal = MemoryJournal()
    first = Recorder(journal=journal, run_id=1)
    huge = "NONCE-HEAD " + "q" * 60_000 + " NONCE-TAIL"
    engine = make_engine(
        ReadingGateway(chars=10),
        tools=("big_output",),
        budget=DEMO_BUDGET,
        recorder=first,
        config=EngineConfig(record_store=first.store()),
    )
    # A question this large is refused at the door today; sessions from before still hold one.
    engine.start(run_number=1, attempt=1, system_prompt="sys", question=huge)
    second = Recorder(journal=journal, run_id=2)
    config = EngineConfig(record_store=second.store())
    gateway = ReadingGateway(chars=10)
    engine = make_engine(
        gateway,
        tools=("big_output",),
        budget=DEMO_BUDGET,
        recorder=second,
        large_records=LARGE,
        config=config,
    )
    binding = {
        "budget": DEMO_BUDGET.to_dict(),
        "estimator": JsonBytesEstimator().binding(),
        "large_records": LARGE,
    }
    history = journal.history(binding=binding)
    assert history.excerpts == {1: history.excerpts[1]}
    outcome = engine.start(
        run_number=2, attempt=1, system_prompt="sys", question="next", history=history
    )
    assert outcome.status == "succeeded", outcome.error
    first_request = gateway.requests[0]
    seen = json.dumps(first_request.messages)
    # Named by the reference its run gave it (rendering 5), read back by it or by its seq.
    assert "NONCE-HEAD" in seen and "NONCE-TAIL" in seen and 'ref=\\"r1:1\\"' in seen
    assert "read_record" in _tool_names(first_request)
    context = JournalContextManager(
        ContextBinding(ContextPolicy(), DEMO_BUDGET, large_records=LargeRecords()),
        ContextOptions(record_store=second.store()),
    )
    context.restore(InstanceFrame.from_dict(second.stored[-1], store=second.store()))
    assert context.read_record("r1:1", 11, 5).endswith("qqqqq")
    assert context.read_record("s:1", 11, 5).endswith("qqqqq")
    with pytest.raises(ToolError):
        context.read_record(f"s:{len(journal.rows) + 5}")


def _masking_context(**options):
    policy = ContextPolicy(context_ratio=0.8, target_ratio=0.6)
    context = new_context(policy, DEMO_BUDGET, large_records=LargeRecords(), **options)
    return context


def _no_call(_request):
    raise AssertionError("masking needs no model call")


def test_compaction_masks_older_tool_results_first_without_a_call():
    context = _masking_context()
    for n in range(8):
        add_group(context, [f"NONCE-{n} " + "r" * 2_000])
    prepared = context.prepare("action", call_model=_no_call)
    outcome = prepared.compaction
    assert (outcome.outcome, outcome.reason, outcome.calls) == ("succeeded", "masked", 0)
    assert outcome.after < outcome.before
    frame = context.frame
    stubs = [m for m in frame.messages if m.get("role") == "tool" and "hidden" in m["content"]]
    assert stubs and 'read_record(ref="r1:3")' in stubs[0]["content"]
    # The newest results are kept verbatim; the records are untouched.
    assert frame.messages[-1]["content"].startswith("NONCE-7")
    assert all(len(r.message["content"]) > 2_000 for r in frame.records if r.kind == "tool_result")
    row = frame.state.compaction_log[-1]
    assert (row["stage"], row["calls"]) == ("masking", 0)
    masked = frame.compactions[-1]["sources"]["masked"]["own"]
    assert masked[0][0] == 3
    # A masked result can be read back whole.
    assert "NONCE-0" in context.read_record("r1:3")


def test_a_summary_follows_when_masking_is_not_enough():
    context = _masking_context()
    for n in range(4):
        add_group(context, [f"NONCE-{n} " + "r" * 500])
        context.add_feedback("note " + "w" * 2_000)
    calls = []

    def summarise(request):
        calls.append(request)
        return text_response("the summary NONCE-S")

    outcome = context.prepare("action", call_model=summarise).compaction
    assert outcome.outcome == "succeeded" and outcome.reason.startswith("compacted")
    mask, summary = context.frame.state.compaction_log[-2:]
    assert (mask["stage"], mask["outcome"], mask["calls"]) == ("masking", "applied", 0)
    assert summary["stage"] == "summary" and summary["before"] == mask["after"]
    assert summary["calls"] == len(calls) >= 1
    # The summary read the tool results as they were, not their stubs.
    material = json.dumps([m for r in calls for m in r.messages])
    assert "NONCE-0" in material


def test_a_masked_run_round_trips_and_resumes_from_its_references():
    recorder = Recorder()

    class ManyTools(ModelGateway):
        def __init__(self):
            self.steps = 0

        def complete(self, request):
            if request.purpose == "compaction":
                return text_response("summary")
            self.steps += 1
            if self.steps <= 8:
                return tool_call_response(("big_output", {"chars": 1_500}))
            return text_response("done")

    engine = make_engine(
        ManyTools(),
        tools=("big_output",),
        budget=DEMO_BUDGET,
        recorder=recorder,
        large_records=LARGE,
        config=EngineConfig(record_store=recorder.store()),
    )
    outcome = engine.start(run_number=1, attempt=1, system_prompt="sys", question="go")
    assert outcome.status == "succeeded"
    stages = [row.get("stage") for row in outcome.frame["state"]["compaction_log"]]
    assert "masking" in stages
    # Recorder rebuilt every save from references; resuming the stored frame works too.
    stored = recorder.stored[-1]
    frame = InstanceFrame.from_dict(stored, store=recorder.store())
    assert any(origin and origin.get("mask") for origin in frame.origins)
    assert frame.to_dict() == json.loads(json.dumps(outcome.frame))


def test_excerpts_fit_the_limit_for_every_size():
    sizer = RecordSizer(500, JsonBytesEstimator())
    for length in (2_100, 5_000, 30_000, 200_000):
        text = "ab\n" * (length // 3)
        chars = sizer.excerpt_chars(text, "r1:1")
        assert chars is not None
        assert sizer.size(excerpt(text, chars, "r1:1")) <= 500
    assert sizer.excerpt_chars("short", "r1:1") is None
