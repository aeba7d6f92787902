"""Small windows publish: the room for a question is counted in the unit the hard check of the
version's runs uses; with the server's own tokenizer the Demo agent's tools fit 4,096 tokens."""

from __future__ import annotations

import pytest

from agentloom.errors import InvalidInput
from context_app.engine_adapter import input_check
from context_app.services.agents import agent_create, agent_publish, agent_question_room
from models_app.models import ModelConnection
from sessions_app.demo import DEMO_SUB_AGENTS, DEMO_SYSTEM_PROMPT, DEMO_TOOLS
from sessions_app.services.runs import session_create
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
    # The door and the agent's page measure with them, without asking the server again.
    session = session_create(user=alice, agent_version=version)
    assert input_check(version, "What is the time?").limit >= 512
    assert agent_question_room(version.agent)["room"] >= 512
    assert llama.tokenize_calls == asked
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
