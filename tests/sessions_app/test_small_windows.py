"""Small windows publish: the room for a question is counted in the unit the hard check of the
version's runs uses; with the server's own tokenizer the Demo agent's tools fit 4,096 tokens."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentloom.errors import InvalidInput
from context_app.engine_adapter import input_check
from context_app.services.agents import agent_create, agent_publish, agent_question_room
from models_app.models import ModelConnection
from sessions_app.demo import DEMO_SUB_AGENTS, DEMO_SYSTEM_PROMPT, DEMO_TOOLS
from sessions_app.models import Run
from sessions_app.services.runs import run_ask, session_create
from tests.factories import ask, make_connection
from tests.support.llama_double import LlamaServerDouble

pytestmark = pytest.mark.django_db


@pytest.fixture
def llama(settings):
    """llama-cpp-python's server at 4,096 tokens, counting with its own tokenizer."""
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    with LlamaServerDouble("llama-cpp-python", n_ctx=4_096) as double:
        yield double


def small_connection(space, base_url, *, estimator, window=4_096):
    return make_connection(
        space,
        provider="openai_compatible",
        base_url=base_url,
        model_id="smollm2",
        context_window=window,
        max_output_tokens=512,
        safety_margin_tokens=256,
        window_source="manual",
        estimator=estimator,
        estimator_source="manual",
    )


def demo_agent(user, connection):
    """The Demo agent as `sessions_app.demo` makes it: its system prompt, every built-in tool
    (`read_record` comes with its large-record policy) and its sub-agent."""
    return agent_create(
        user=user,
        space=connection.space,
        name=f"Demo {connection.pk}",
        system_prompt=DEMO_SYSTEM_PROMPT,
        model_connection=connection.pk,
        tools=list(DEMO_TOOLS),
        sub_agents=DEMO_SUB_AGENTS,
    )


def test_the_demo_tools_publish_at_4096_tokens_on_a_tokenizing_server(alice, space, llama):
    connection = small_connection(space, llama.base_url, estimator="server")
    version = agent_publish(user=alice, agent=demo_agent(alice, connection))
    assert version.snapshot["server_tokenizer"]["route"]
    assert version.snapshot["budget"]["context_window"] == 4_096
    # Counted by the server: its tokenizer was asked at publish, and its counts are kept.
    assert llama.tokenize_calls > 0
    assert version.snapshot["server_tokenizer"]["counts"]
    asked = llama.tokenize_calls
    # The agent's page and the door's limit measure with them, without asking the server again;
    # the door asks it once for the question itself.
    session = session_create(user=alice, agent_version=version)
    assert agent_question_room(version.agent)["room"] >= 512
    assert input_check(version, "").limit >= 512
    assert llama.tokenize_calls == asked
    assert input_check(version, "What is the time?").fits
    assert llama.tokenize_calls == asked + 1
    assert ask(session, alice, '/tool echo {"text": "hi"}').status == "succeeded"
    assert not llama.over_window()


def test_the_demo_tools_are_refused_at_4096_in_bytes_naming_the_unit(alice, space, llama):
    connection = small_connection(space, llama.base_url, estimator="bytes")
    with pytest.raises(InvalidInput) as raised:
        agent_publish(user=alice, agent=demo_agent(alice, connection))
    assert raised.value.field == "question_room"
    assert "Counted in UTF-8 bytes" in str(raised.value.detail)
    assert "below the floor of 512" in str(raised.value.detail)
    assert llama.tokenize_calls == 0


def test_a_server_estimator_on_a_server_that_does_not_tokenize_is_refused(alice, space, llama):
    llama.tokenizers = set()
    connection = small_connection(space, llama.base_url, estimator="server")
    with pytest.raises(InvalidInput) as raised:
        agent_publish(user=alice, agent=demo_agent(alice, connection))
    assert raised.value.field == "model_connection"
    assert "does not tokenize" in str(raised.value.detail)
    assert ModelConnection.objects.get(pk=connection.pk).agent_versions.count() == 0


PROSE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "


def pasted(limit: int) -> str:
    """Return pasted prose whose UTF-8 bytes are well over `limit` (about 4.7 bytes a token)."""
    text = "Read this and tell me what it says: " + PROSE * (limit * 3 // 2 // len(PROSE) + 1)
    return text.strip()


def server_session(user, space, llama):
    connection = small_connection(space, llama.base_url, estimator="server")
    version = agent_publish(user=user, agent=demo_agent(user, connection))
    return session_create(user=user, agent_version=version)


def test_the_door_counts_a_question_with_the_servers_tokenizer(alice, space, llama):
    session = server_session(alice, space, llama)
    version = session.agent_version
    limit = input_check(version, "").limit
    question = pasted(limit)
    # In bytes the question would be refused; the server counts it at a fraction of that.
    assert len(question.encode()) > limit
    asked = llama.tokenize_calls
    check = input_check(version, question)
    assert check.fits and check.fallback is None, check
    assert llama.tokenize_calls == asked + 1  # one count of the question, nothing else
    assert check.size < len(question.encode()) // 3
    assert check.unit == "tokens of the server's own tokenizer"
    run = ask(session, alice, question)
    assert run.status == Run.Status.SUCCEEDED, run.error
    assert not llama.over_window()


def test_the_door_measures_in_bytes_when_the_tokenizer_fails_and_says_so(alice, space, llama):
    session = server_session(alice, space, llama)
    version = session.agent_version
    limit = input_check(version, "").limit
    question = pasted(limit)
    llama.tokenizer_failure = "error"
    check = input_check(version, question)
    # The door still answers: the question in bytes, an upper bound, against the same limit.
    assert (check.fallback, check.limit) == ("bytes", limit)
    assert check.size > len(question.encode()) and not check.fits
    with pytest.raises(InvalidInput) as refused:
        run_ask(user=alice, session=session, question=question)
    assert refused.value.field == "question"
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post(f"/api/v1/sessions/{session.pk}/runs", {"question": question}, "json")
    assert answer.status_code == 400
    [message] = answer.json()["question"]
    unit = "tokens of the server's own tokenizer"
    assert f"estimated at {check.size:,} {unit}, above the limit of {limit:,} {unit}" in message
    assert "counted in UTF-8 bytes" in message
    # A short question fits in bytes too: it is asked.
    answer = api.post(f"/api/v1/sessions/{session.pk}/runs", {"question": "Hi?"}, "json")
    assert answer.status_code == 202
    assert [run.question for run in Run.objects.filter(session=session)] == ["Hi?"]
