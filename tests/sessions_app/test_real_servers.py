"""Sessions on self-hosted servers, as a person sets them up, against the self-hosted double.

The double (`tests.support.llama_double`) behaves like llama-cpp-python's server at `--n_ctx
4096` unless a test says otherwise: no window in its model list, no usage in streams, a streamed
overflow that is a 200 with an empty body, its own tokenizer behind `/extras/tokenize`. A person
discovers the model (or types its window in), saves the connection, publishes an agent and asks
questions through the services; every request the double received is counted by its own
tokenizer and template, so a test can say that none was over the window.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from context_app.services.agents import agent_create, agent_publish, agent_question_room
from models_app.models import ModelConnection
from models_app.services.connections import connection_create
from models_app.services.discovery import models_discover
from sessions_app.demo import DEMO_SUB_AGENTS, DEMO_SYSTEM_PROMPT, DEMO_TOOLS
from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.services.execution import run_execute
from sessions_app.services.runs import run_resume, session_create
from tests.factories import ask, make_space
from tests.support.llama_double import MODEL_PATH, LlamaServerDouble

pytestmark = pytest.mark.django_db

WINDOW = 4096
TOOLS = ["echo", "calculator", "big_output"]
FILLER = "The quick brown fox jumps over the lazy dog near the quiet river bank. "
PLAIN = ["What was the first nonce you saw?", "Thank you, that is all.", "Say goodbye."]


@pytest.fixture
def private_hosts(settings):
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True


@pytest.fixture
def server(private_hosts):
    with LlamaServerDouble(n_ctx=WINDOW) as double:
        yield double


@pytest.fixture
def space(alice):
    return make_space(admin=alice)


def discovered(user, space, double, *, estimator: bool = False, **extra) -> ModelConnection:
    """Save the connection the model page fills in from discovery (the chat model picked);
    with `estimator`, also the estimator discovery proposes (the server's tokenizer when the
    server tokenizes)."""
    [model] = [
        m
        for m in models_discover(user=user, provider="openai_compatible", base_url=double.base_url)
        if m.chat
    ]
    fields = {
        "context_window": model.context_window,
        "max_output_tokens": model.max_output_tokens,
        "window_source": model.window_source,
    }
    if model.max_output_cap is not None:
        fields["max_output_cap"] = model.max_output_cap
    if model.source_url:
        fields["source_url"] = model.source_url
    if model.verified_on:
        fields["verified_on"] = model.verified_on
    if estimator:
        fields["estimator"] = model.estimator
    return connection_create(
        user=user,
        space=space,
        name="self-hosted",
        provider="openai_compatible",
        base_url=double.base_url,
        model_id=model.id,
        **{**fields, **extra},
    )


def typed_in(user, space, double, **extra) -> ModelConnection:
    """Save a connection whose window a person typed in: 4,096, output 512, margin 256,
    measured with the server's own tokenizer."""
    fields = {"estimator": "server", **extra}
    return connection_create(
        user=user,
        space=space,
        name="self-hosted",
        provider="openai_compatible",
        base_url=double.base_url,
        model_id=MODEL_PATH,
        context_window=WINDOW,
        max_output_tokens=512,
        safety_margin_tokens=256,
        **fields,
    )


def published(user, space, connection, *, tools=TOOLS, system_prompt="You help."):
    agent = agent_create(
        user=user,
        space=space,
        name="Helper",
        system_prompt=system_prompt,
        model_connection=connection.pk,
        tools=list(tools),
        sub_agents=[],
        context_policy=None,
    )
    return session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


def question(number: int) -> str:
    """Return the session's question `number`: tool calls, large results, pasted text."""
    kind = number % 4
    if kind == 0:
        return f'/tool big_output {{"chars": 2500}} NONCE-{number}'
    if kind == 1:
        return f'/tool echo {{"text": "NONCE-{number}"}}'
    if kind == 2:
        return f"Read this and tell me what it says, NONCE-{number}: " + FILLER * 8
    return f'/tool calculator {{"expression": "{number} * 7"}} /tool big_output {{"chars": 1500}}'


def learned(connection: ModelConnection) -> tuple:
    connection.refresh_from_db()
    return (connection.learned_window, connection.learned_window_at)


def long_session(user, session, connection, questions: int):
    """Ask `questions` session questions then the plain ones; return the runs and what the
    connection had learned after each."""
    runs, seen = [], []
    for number in range(questions):
        runs.append(ask(session, user, question(number)))
        seen.append(learned(connection))
    for text in PLAIN:
        runs.append(ask(session, user, text))
        seen.append(learned(connection))
    return runs, seen


def compactions(user, run: Run) -> list[dict]:
    """Return the compactions of `run` as its context page lists them."""
    api = APIClient()
    api.force_authenticate(user)
    return api.get(f"/api/v1/runs/{run.pk}/context").json()["compactions"]


def failures(runs: list[Run]) -> list[tuple[int, str, str]]:
    return [(n, r.question[:40], r.error) for n, r in enumerate(runs) if r.status != "succeeded"]


# --- (a) a 4,096 window, as discovered and as typed in --------------------------------------------


def test_discovery_names_no_window_for_llama_cpp_python_and_reads_llama_cpp_props(
    alice, private_hosts, space
):
    with LlamaServerDouble(n_ctx=WINDOW) as double:
        [model] = models_discover(
            user=alice, provider="openai_compatible", base_url=double.base_url
        )
        assert model.id == MODEL_PATH and model.window_source == "platform_default"
    with LlamaServerDouble("llama.cpp", n_ctx=WINDOW) as double:
        [model] = models_discover(
            user=alice, provider="openai_compatible", base_url=double.base_url
        )
        # The window it was started with, not the model's training maximum (8,192).
        assert (model.context_window, model.window_source) == (WINDOW, "server_props")
        assert double.hits("/props") >= 1


def test_a_discovered_connection_learns_the_window_from_an_overflow_and_every_question_after_succeeds(  # noqa: E501
    alice, server, space
):
    # Discovery's window and estimator, with an output limit and margin that fit the real window.
    connection = discovered(
        alice, space, server, estimator=True, max_output_tokens=512, safety_margin_tokens=256
    )
    assert connection.window_source == "platform_default" and connection.context_window > WINDOW
    session = published(alice, space, connection)
    runs, seen = long_session(alice, session, connection, questions=20)

    assert not failures(runs), failures(runs)
    refused = [n for n, c in enumerate(server.counted) if c.outcome == "refused"]
    # The server refused once, unstreamed, with the window named: a request with tools goes
    # unstreamed once the run's first one was answered only so (`tool_choice: "auto"` streamed
    # ends empty there). The run compacted and its retried call was answered.
    assert [server.counted[n].stream for n in refused] == [False], refused
    after = server.counted[refused[-1] + 1 :]
    retried = next(c for c in after if c.purpose != "compaction")
    assert retried.outcome == "ok"
    assert retried.prompt_tokens < server.counted[refused[-1]].prompt_tokens
    [refusing] = {call.run for call in ModelCall.objects.filter(error__startswith="context_length")}
    calls = list(refusing.model_calls.all())
    failed = next(n for n, call in enumerate(calls) if call.error)
    assert calls[-1].purpose == "action" and not calls[-1].error and failed < len(calls) - 1
    assert calls[-1].request_estimate < calls[failed].request_estimate
    assert any(item["outcome"] == "succeeded" for item in compactions(alice, refusing))
    # Every prompt after the learning fit the window (the server cuts a larger output limit to
    # what is left, so only the prompt is refused).
    assert all(c.prompt_tokens < WINDOW for c in after), [c for c in after if c.outcome != "ok"]
    # The window is recorded once on the connection, with the server's evidence.
    values = {value for value in seen if value[0] is not None}
    assert len(values) == 1, values
    # The window the server named, not one bounded in the estimator's own units.
    assert connection.learned_window == WINDOW
    connection.refresh_from_db()
    assert connection.learned_window_evidence
    assert any(call.purpose == "compaction" for run in runs for call in run.model_calls.all())


def test_a_learned_window_keeps_the_reservations_shares_and_the_session_goes_on(
    alice, server, space
):
    # Discovery's defaults: a 4,096-token output limit and a 1,024 margin, chosen for the 32,768
    # window it assumed; on the real 4,096 they would leave no input at all.
    connection = discovered(alice, space, server, estimator=True)
    assert (connection.context_window, connection.max_output_tokens) == (32_768, WINDOW)
    margin = connection.safety_margin_tokens
    session = published(alice, space, connection)
    runs = []
    for number in range(20):
        runs.append(ask(session, alice, question(number)))
        if learned(connection)[0] is not None:
            break
    assert learned(connection)[0] == WINDOW
    # The reservation keeps its shares of the window (an eighth here), for the connection and
    # for the runs of the version published before.
    assert connection.max_output_tokens == WINDOW // 8
    assert connection.safety_margin_tokens == margin // 8
    # The run that learned it compacts, retries and answers; so does every question after it.
    runs += [ask(session, alice, question(number)) for number in range(20, 24)]
    assert not failures(runs), failures(runs)
    # From the refusal on, every request's prompt and output limit fit the learned window.
    counted = server.counted
    refused = [n for n, call in enumerate(counted) if call.outcome != "ok"]
    assert refused
    after = counted[refused[-1] + 1 :]
    assert after and all(call.requested <= call.window for call in after), after


def test_tools_reach_a_server_that_renders_them_only_when_asked_and_answers_null_content_500(
    alice, server, space
):
    # llama-cpp-python's `chatml-function-calling`: tools are in the prompt only when a request
    # names `tool_choice`, a streamed `"auto"` ends empty, and an assistant message with
    # `content: null` (what its tool-call replies carry) is an HTTP 500 when sent back.
    connection = typed_in(alice, space, server)
    session = published(alice, space, connection)
    runs = [ask(session, alice, question(number)) for number in (1, 3, 5)]
    assert not failures(runs), failures(runs)
    bodies = server.chat_bodies()
    offered = [body for body in bodies if body.get("tools")]
    assert offered and all(body.get("tool_choice") in ("auto", "none") for body in offered)
    assert not any(
        message.get("role") == "assistant" and message.get("content", "") is None
        for body in bodies
        for message in body["messages"]
    )
    # The tools were called and their results answered.
    calls = SessionMessage.objects.filter(session=session, kind="tool_result").count()
    assert calls >= 4, calls
    # A run's first request with tools ends its stream empty twice and is answered unstreamed;
    # its later ones go unstreamed at once.
    streamed = [body.get("stream") is True for body in offered]
    assert streamed.count(True) <= 2 * len(runs), streamed
    assert streamed[:3] == [True, True, False], streamed


def test_a_typed_in_window_with_the_server_tokenizer_is_never_refused(alice, server, space):
    connection = typed_in(alice, space, server)
    session = published(alice, space, connection)
    runs, _ = long_session(alice, session, connection, questions=20)

    assert not failures(runs), failures(runs)
    assert not server.refusals()
    assert not server.over_window(), server.over_window()
    assert server.tokenize_calls > 0
    assert any(call.purpose == "compaction" for run in runs for call in run.model_calls.all())


# --- (b) a stream without usage calibrates from the tokenizer -------------------------------------


def test_a_stream_without_usage_is_recorded_as_such_and_measured_by_the_tokenizer(
    alice, server, space
):
    connection = discovered(alice, space, server, estimator=True)
    assert connection.estimator == "server"
    # A chat format that renders tools without `tool_choice` and streams them (llama-cpp-python
    # started with `--chat_format chatml`); `chatml-function-calling` answers them unstreamed.
    server.tool_choice_required = False
    session = published(alice, space, connection)
    runs = [ask(session, alice, question(number)) for number in range(6)]
    assert not failures(runs), failures(runs)
    calls = list(ModelCall.objects.filter(run__session=session, purpose="action"))
    # No usage arrived: none is recorded, never zeros.
    assert calls and all(call.usage is None for call in calls)
    assert all(call.reported_prompt_tokens is None for call in calls)
    # What calibrates instead is the server tokenizer's count of the exact payload.
    assert server.tokenize_calls > 0
    later = calls[len(calls) // 2 :]
    measured = [
        call
        for call in later
        if (call.calibration or {}).get("ratio") is not None
        or isinstance((getattr(call, "counts", None) or {}).get("server"), int)
    ]
    assert measured, [(call.calibration, getattr(call, "counts", None)) for call in later]


def tokenized(double: LlamaServerDouble) -> list[str]:
    """Return every text the double's tokenizer was asked to count, in order."""
    return [
        request.json["input"]
        for request in double.requests
        if request.path == "/extras/tokenize/count" and isinstance(request.json, dict)
    ]


def test_a_later_run_sends_the_tokenizer_only_texts_it_never_counted(alice, server, space):
    connection = typed_in(alice, space, server)
    session = published(alice, space, connection)
    assert ask(session, alice, question(1)).status == "succeeded"
    before = tokenized(server)
    assert ask(session, alice, question(2)).status == "succeeded"
    later = tokenized(server)[len(before) :]
    # The second run's history, system prompt and tools were counted already: only its new
    # messages (the question, the answer) are asked, and no text twice.
    assert later and not set(later) & set(before), set(later) & set(before)
    assert len(later) == len(set(later))
    assert any("NONCE-2" in text for text in later)


# --- (c) the tokenizer stops answering ------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "questions"),
    # A tokenizer that hangs costs the client's time bound per count: two questions show it.
    [("error", 5), pytest.param("slow", 2, marks=pytest.mark.slow)],
)
def test_a_tokenizer_that_stops_answering_never_lets_a_request_over_the_window(
    alice, server, space, failure, questions
):
    server.tokenizer_delay = 60.0
    connection = typed_in(alice, space, server)
    session = published(alice, space, connection)
    runs = [ask(session, alice, question(number)) for number in range(4)]
    assert not failures(runs), failures(runs)

    server.tokenizer_failure = failure
    stopped = [ask(session, alice, question(number)) for number in range(4, 4 + questions)]
    # Each run either went on with the fallback count or stopped with a resumable error.
    for run in stopped:
        assert run.status in ("succeeded", "failed"), (run.status, run.error)
    assert not server.refusals()
    assert not server.over_window(), server.over_window()
    fallbacks = [
        (getattr(call, "counts", None) or {}).get("fallback")
        for call in ModelCall.objects.filter(run__in=stopped)
    ]
    assert any(fallbacks) or any(run.status == "failed" for run in stopped), fallbacks

    # The tokenizer is back: stopped runs resume, and the next question succeeds.
    server.tokenizer_failure = None
    for run in stopped:
        if run.status == "failed":
            run_resume(user=alice, run=run)
            run_execute(run_id=run.pk)
            run.refresh_from_db()
            assert run.status == "succeeded", run.error
    assert ask(session, alice, PLAIN[0]).status == "succeeded"
    assert not server.over_window(), server.over_window()


# --- (d) a DeepSeek model behind an OpenAI-compatible endpoint ------------------------------------


def test_a_deepseek_model_behind_a_proxy_answers_every_question_after_its_first_tool_call(
    alice, private_hosts, space
):
    with LlamaServerDouble("vllm", n_ctx=65_536) as proxy:
        proxy.deepseek_reasoning = True
        proxy.stream_usage = True
        proxy.model_path = "deepseek-v4-flash"
        connection = connection_create(
            user=alice,
            space=space,
            name="proxy",
            provider="openai_compatible",
            base_url=proxy.base_url,
            model_id="deepseek-v4-flash",
            context_window=65_536,
            max_output_tokens=4096,
        )
        session = published(alice, space, connection)
        lines = [
            '/tool echo {"text": "NONCE-1"}',
            "What did the tool say?",
            '/tool calculator {"expression": "6*7"}',
            '/tool echo {"text": "NONCE-2"} /tool echo {"text": "NONCE-3"}',
            "And now?",
            "Thank you.",
        ]
        runs = [ask(session, alice, line) for line in lines]

        assert not failures(runs), failures(runs)
        # A refusal is answered once, within its run, by passing the reasoning back.
        refused = [r for r in proxy.requests if r.violations]
        assert len(refused) <= len(runs), [r.violations for r in refused]
        last = proxy.chat_bodies()[-1]
        spans = [m for m in last["messages"] if m.get("tool_calls")]
        assert spans and all(m.get("reasoning_content") for m in spans)
        # Every reasoning a reply carried is journaled.
        answers = SessionMessage.objects.filter(run__session=session, kind="assistant")
        assert answers and all(row.message.get("reasoning_content") for row in answers)
        # The rule is recorded on the connection, and a version published now starts from it.
        connection.refresh_from_db()
        assert connection.learned_reasoning == "tool_spans"
        before = len(refused)
        again = published(alice, space, connection)
        runs = [ask(again, alice, line) for line in lines[:3]]
        assert not failures(runs), failures(runs)
        assert len([r for r in proxy.requests if r.violations]) == before


def test_a_version_published_before_the_rule_was_learned_is_refused_once_not_every_run(
    alice, private_hosts, space
):
    with LlamaServerDouble("vllm", n_ctx=65_536) as proxy:
        proxy.deepseek_reasoning = True
        proxy.stream_usage = True
        proxy.model_path = "deepseek-v4-flash"
        connection = connection_create(
            user=alice,
            space=space,
            name="proxy",
            provider="openai_compatible",
            base_url=proxy.base_url,
            model_id="deepseek-v4-flash",
            context_window=65_536,
            max_output_tokens=4096,
        )
        # Published before anything was learned: the version freezes no rule.
        session = published(alice, space, connection)
        assert session.agent_version.snapshot["reasoning"] is None

        def refused() -> int:
            return len([r for r in proxy.requests if r.violations])

        first = ask(session, alice, '/tool echo {"text": "NONCE-1"}')
        assert first.status == "succeeded", first.error
        assert refused() == 1  # learned from one refusal, answered within the run
        connection.refresh_from_db()
        assert connection.learned_reasoning == "tool_spans"
        # Every later run of the same version starts from the rule the connection learned.
        for line in ["What did the tool say?", '/tool echo {"text": "NONCE-2"}', "And now?"]:
            run = ask(session, alice, line)
            assert run.status == "succeeded", run.error
        assert refused() == 1, [r.violations for r in proxy.requests if r.violations]


# --- (e) the Demo agent's tools publish at 4,096 --------------------------------------------------


def test_the_demo_agents_tools_publish_at_4096_on_a_tokenizer_backed_connection(
    alice, server, space
):
    connection = typed_in(alice, space, server)
    agent = agent_create(
        user=alice,
        space=space,
        name="Demo",
        system_prompt=DEMO_SYSTEM_PROMPT,
        model_connection=connection.pk,
        tools=list(DEMO_TOOLS),
        sub_agents=[dict(sub) for sub in DEMO_SUB_AGENTS],
        context_policy=None,
    )
    version = agent_publish(user=alice, agent=agent)
    session = session_create(user=alice, agent_version=version)
    assert ask(session, alice, '/tool echo {"text": "hi"}').status == "succeeded"
    assert not server.over_window()
    # The page shows the same room, counted in the same unit.
    room = agent_question_room(agent)
    assert room is not None and room["room"] >= room["floor"], room
