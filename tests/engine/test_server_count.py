"""The `server` estimator: counts from the server's own tokenizer, and what happens without it."""

from __future__ import annotations

import json

import pytest

from agentloom.engine import (
    ContextPolicy,
    EngineConfig,
    GatewayError,
    ModelBudget,
    ModelGateway,
    ServerEstimator,
    TokenCounter,
    estimator_from_binding,
    estimator_named,
)
from agentloom.engine._server_count import (
    COUNTER_PAUSE_SECONDS,
    ESTIMATE_MARGINS,
    FALLBACK_BYTES,
    FALLBACK_LAST_EXACT,
    SERVER_MARGINS,
    autoescaped,
    rendered_text,
)
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
from tests.engine.helpers import Recorder, make_engine

TOOL = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Return the text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
M = SERVER_MARGINS
E = ESTIMATE_MARGINS
# How many times each margin counts in `conversation()` with one tool.
USED = {"per_request": 1, "per_message": 4, "per_call": 1, "tools_preamble": 1, "per_tool": 1}


class WordCounter:
    """A tokenizer server double: a text's count is its words; it can be made to fail."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.failing = False

    def count(self, texts):
        self.calls.append(list(texts))
        if self.failing:
            raise ConnectionError("the tokenizer did not answer")
        return [len(text.split()) for text in texts]


def words(text: str) -> int:
    return len(text.split())


def tool_words(tool) -> int:
    return max(words(json.dumps(tool, separators=(",", ":"))), words(json.dumps(tool)))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello to the world"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "hello world"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "hello world"},
    ]


def test_a_request_is_the_servers_count_of_each_rendered_text_plus_the_stated_margins():
    counter = WordCounter()
    estimator = ServerEstimator(counter=counter)
    messages = conversation()

    counts = estimator.counts(messages, [TOOL])

    texts = [rendered_text(message) for message in messages]
    assert texts[2] == 'assistant\necho\n{"text": "hello world"}'
    assert texts[3] == "tool\nc1\nhello world"
    # One batch: every message's text and both JSON forms of the tool.
    escaped = [autoescaped(text) for text in texts]
    assert escaped[2] == "assistant\necho\n{&#34;text&#34;: &#34;hello world&#34;}"
    assert counter.calls == [[*escaped, json.dumps(TOOL, separators=(",", ":")), json.dumps(TOOL)]]
    expected = (
        sum(words(text) for text in escaped)
        + tool_words(TOOL)
        + M["per_request"]
        + M["per_message"] * 4
        + M["per_call"] * 1
        + M["tools_preamble"]
        + M["per_tool"]
    )
    # The triggers' estimate counts only the markers ChatML itself adds around the texts.
    estimate = (
        expected
        - sum(M[key] * n for key, n in USED.items())
        + sum(E[key] * n for key, n in USED.items())
    )
    assert counts == {
        "server": expected,
        "fallback": None,
        "upper_bound": expected,
        "estimate": estimate,
    }
    assert estimator.estimate(messages, [TOOL]) == estimate < expected
    assert isinstance(counter, TokenCounter)


def test_counts_are_cached_per_content_and_only_new_texts_are_sent_in_one_batch():
    counter = WordCounter()
    estimator = ServerEstimator(counter=counter)
    messages = conversation()
    first = estimator.upper_bound(messages, [TOOL])

    # The same content in new objects is not counted again.
    assert estimator.upper_bound(json.loads(json.dumps(messages)), [dict(TOOL)]) == first
    grown = [*messages, {"role": "assistant", "content": "Done with it"}]
    estimator.upper_bound(grown, [TOOL])

    assert len(counter.calls) == 2
    assert counter.calls[1] == ["assistant\nDone with it"]
    # Another run on the same server shares the counts; its record starts empty.
    run = estimator.for_run()
    assert run.recorded() == {}
    run.upper_bound(grown, [TOOL])
    assert len(counter.calls) == 2
    assert len(run.recorded()) == 6
    # Counts are one tokenizer's: another server model's counter counts everything again.
    other = WordCounter()
    estimator.attach(other)
    estimator.upper_bound(grown, [TOOL])
    assert len(other.calls) == 1 and len(other.calls[0]) == 7


def test_when_the_tokenizer_fails_the_bound_is_the_last_exact_count_plus_the_bytes_since():
    counter, clock = WordCounter(), Clock()
    estimator = ServerEstimator(counter=counter, clock=clock)
    messages = conversation()
    exact = estimator.counts(messages, [TOOL])["server"]
    counter.failing = True
    appended = {"role": "user", "content": "Now say it in French, please"}

    counts = estimator.counts([*messages, appended], [TOOL])

    text = rendered_text(appended)
    bound = exact + len(text.encode()) + M["per_message"]
    assert counts == {
        "server": None,
        "fallback": FALLBACK_LAST_EXACT,
        "upper_bound": bound,
        "estimate": bound,
    }
    # A request with nothing counted is all bytes, with the same margins; the failed counter is
    # left alone for a while rather than asked at every measure.
    other = ServerEstimator(counter=counter, clock=clock)
    alone = other.counts([appended], [])
    bytes_bound = len(text.encode()) + M["per_message"] + M["per_request"]
    assert alone == {
        "server": None,
        "fallback": FALLBACK_BYTES,
        "upper_bound": bytes_bound,
        "estimate": bytes_bound,
    }
    asked = len(counter.calls)
    estimator.counts([*messages, appended], [TOOL])
    assert len(counter.calls) == asked
    clock.now += COUNTER_PAUSE_SECONDS
    counter.failing = False
    assert estimator.counts([*messages, appended], [TOOL])["fallback"] is None


@pytest.mark.parametrize("answer", [[1], ["3"] * 4, None, [True] * 4, [-1] * 4])
def test_a_counter_that_answers_nonsense_is_a_failure_not_a_count(answer):
    class Broken:
        def count(self, texts):
            return answer

    counts = ServerEstimator(counter=Broken()).counts(conversation(), [])

    assert counts["fallback"] == FALLBACK_BYTES


def test_the_binding_freezes_the_margins_and_the_counter_is_attached_at_run_time():
    counter = WordCounter()
    binding = json.loads(json.dumps(estimator_named("server").binding()))
    assert binding == {
        "module_id": ServerEstimator.module_id,
        "config": {**M, "escape_html": True},
    }

    estimator = estimator_from_binding(binding, counter)

    assert isinstance(estimator, ServerEstimator)
    assert estimator.counter is counter
    assert estimator_from_binding({"module_id": ServerEstimator.module_id}).counter is None


class StreamDouble(ModelGateway):
    """A server that streams: no usage on any reply; tool calls for `steps`, then an answer."""

    provider, model_id = "double", "server"

    def __init__(self, steps: list[str]):
        self.steps = list(steps)
        self.requests = []

    def complete(self, request):
        self.requests.append(request)
        if request.purpose == "compaction":
            return text_response("summary of the earlier work")
        if self.steps:
            step = self.steps.pop(0)
            if isinstance(step, Exception):
                raise step
            return tool_call_response(("echo", {"text": step}))
        return text_response("done")


def _run(counter, *, steps, budget=None, recorder=None, question="Say it", gateway=None, **options):
    recorder = recorder or Recorder(MemoryJournal())
    engine = make_engine(
        gateway or StreamDouble(steps),
        budget=budget or ModelBudget(32_768, 1_000, 0),
        recorder=recorder,
        estimator=ServerEstimator(counter=counter),
        **options,
    )
    outcome = engine.start(
        run_number=1, attempt=1, system_prompt="You are terse.", question=question
    )
    return engine, outcome, recorder


def test_each_call_records_the_counts_its_hard_check_used_and_the_checkpoint_keeps_them():
    counter = WordCounter()
    _, outcome, recorder = _run(counter, steps=["one two three"])

    assert outcome.status == "succeeded"
    assert [call.counts["fallback"] for call in recorder.calls] == [None, None]
    for call in recorder.calls:
        assert call.counts["upper_bound"] == call.counts["server"] > 0
        assert call.usage is None  # the stream reported none: recorded as none, not zeros
    saved = recorder.saves[-1]["state"]["token_counts"]
    assert saved and all(isinstance(count, int) for count in saved.values())
    # The second request counted only what the first did not hold.
    assert len(counter.calls) == 2


def test_a_resume_without_the_tokenizer_measures_with_the_counts_its_checkpoint_kept():
    counter = WordCounter()
    double = StreamDouble(["one two three"])
    double.steps.append(GatewayError("upstream", "The provider failed."))
    _, failed, recorder = _run(counter, steps=[], gateway=double)
    assert failed.status == "failed"
    refused = recorder.calls[-1].counts
    assert refused["fallback"] is None

    again = Recorder(recorder.journal)
    resumed = make_engine(
        StreamDouble([]),
        budget=ModelBudget(32_768, 1_000, 0),
        recorder=again,
        estimator=ServerEstimator(),  # no tokenizer at all
        record_store=recorder.store(),
    ).resume(recorder.saves[-1], attempt=2)

    assert resumed.status == "succeeded"
    assert again.calls[0].counts == refused


def test_without_the_tokenizer_a_request_that_does_not_fit_in_bytes_is_not_sent_and_resumes():
    counter = WordCounter()
    counter.failing = True
    # Few words, many bytes: the server's count fits the budget, the bytes do not.
    question = "x" * 9_000
    budget = ModelBudget(10_000, 1_000, 0)
    _, outcome, recorder = _run(counter, steps=[], budget=budget, question=question)

    assert outcome.status == "failed"
    assert "context_budget_exceeded" in outcome.error
    assert "resume the run once the tokenizer answers" in outcome.error
    assert recorder.calls == []  # nothing reached the server

    counter.failing = False
    again = Recorder(recorder.journal)
    resumed = make_engine(
        StreamDouble([]),
        budget=budget,
        recorder=again,
        estimator=ServerEstimator(counter=counter),
        record_store=recorder.store(),
    ).resume(recorder.saves[-1], attempt=2)

    assert resumed.status == "succeeded"
    assert again.calls[0].counts["fallback"] is None
    assert again.calls[0].counts["upper_bound"] <= budget.effective_input_budget


def test_a_call_without_usage_calibrates_from_the_servers_exact_count():
    counter = WordCounter()
    double = StreamDouble(["one two three", "four five"])
    _, outcome, recorder = _run(
        counter,
        steps=[],
        gateway=double,
        config=EngineConfig(calibration={"samples": 5}),
        policy=ContextPolicy(),
    )

    assert outcome.status == "succeeded"
    calibration = recorder.saves[-1]["state"]["calibration"]
    assert len(calibration["samples"]) == 3
    last = double.requests[-1]
    exact = ServerEstimator(counter=WordCounter()).exact_count(last.messages, last.tools)
    assert calibration["base"]["tokens"] == exact
    assert all(call.usage is None for call in recorder.calls)


def test_a_replay_measures_with_the_counts_its_run_recorded_without_the_server():
    counter = WordCounter()
    _, outcome, recorder = _run(counter, steps=["one two three"])
    recorded = recorder.saves[-1]["state"]["token_counts"]

    again = Recorder(MemoryJournal())
    replayed = make_engine(
        StreamDouble(["one two three"]),
        budget=ModelBudget(32_768, 1_000, 0),
        recorder=again,
        estimator=ServerEstimator(),  # no tokenizer
    ).start(
        run_number=1,
        attempt=1,
        system_prompt="You are terse.",
        question="Say it",
        token_counts=recorded,
    )

    assert replayed.status == outcome.status == "succeeded"
    assert [call.counts for call in again.calls] == [call.counts for call in recorder.calls]


@pytest.mark.parametrize("compaction", [4, 5])
def test_a_request_whose_bound_is_over_the_budget_is_compacted_though_its_estimate_is_not(
    compaction,
):
    counter = WordCounter()
    budget = ModelBudget(4_000, 500, 0)
    recorder = Recorder(MemoryJournal())
    # A template whose tool instructions may be long: the bound keeps 1,500 tokens for them, the
    # estimate ChatML's 139.
    estimator = ServerEstimator(counter=counter, tools_preamble=1_500)
    engine = make_engine(
        StreamDouble([" ".join(["word"] * 300)] * 4),
        budget=budget,
        recorder=recorder,
        estimator=estimator,
        compaction=compaction,
    )

    outcome = engine.start(run_number=1, attempt=1, system_prompt="You echo.", question="Echo.")

    assert outcome.status == "succeeded", outcome.error
    log = recorder.saves[-1]["state"]["compaction_log"]
    assert log and log[0]["trigger"] == ["budget"]
    trigger = ContextPolicy().trigger_at(budget)
    if compaction < 5:
        assert log[0]["before"] < trigger  # measured by the estimate, which did not fire
    else:
        # Measured by the hard check's bound: over the budget, and left below the trigger.
        assert log[0]["before"] > budget.effective_input_budget
        assert all(row["after"] < trigger for row in log if row["outcome"] == "succeeded")
    assert all(
        call.counts["upper_bound"] <= budget.effective_input_budget for call in recorder.calls
    )


def test_message_texts_are_counted_as_an_autoescaping_template_renders_them():
    counter = WordCounter()
    message = {"role": "user", "content": 'don\'t "quote" <b> & x'}

    ServerEstimator(counter=counter).counts([message], [])
    ServerEstimator(counter=counter, escape_html=False).counts([message], [])

    assert counter.calls == [
        ["user\ndon&#39;t &#34;quote&#34; &lt;b&gt; &amp; x"],
        ['user\ndon\'t "quote" <b> & x'],
    ]


def test_a_run_whose_tokenizer_stops_answering_goes_on_from_its_last_exact_counts():
    class Failing(WordCounter):
        def count(self, texts):
            self.failing = bool(self.calls)  # answers the first request only
            return super().count(texts)

    counter = Failing()
    double = StreamDouble(["one two three"])
    _, outcome, recorder = _run(counter, steps=[], gateway=double)

    assert outcome.status == "succeeded", outcome.error
    first, second = (call.counts for call in recorder.calls)
    assert first["fallback"] is None
    assert second["fallback"] == FALLBACK_LAST_EXACT and second["server"] is None
    # The first request's exact count, plus the bytes and margins of what came after it.
    appended = double.requests[1].messages[len(double.requests[0].messages) :]
    assert [message["role"] for message in appended] == ["assistant", "tool"]
    since = sum(len(autoescaped(rendered_text(message)).encode()) for message in appended)
    assert (
        second["upper_bound"] == first["upper_bound"] + since + 2 * M["per_message"] + M["per_call"]
    )
