"""What runs learn reaches the connection, and from there new runs and new versions: old versions
run with the smaller of their frozen window and the learned one, never a larger one; new versions
publish with it; the reasoning rule is frozen at publish and handed to the gateway."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from agentloom.engine import LearnedLimit
from context_app.engine_adapter import gateway_for, run_measures, version_binding
from context_app.services.agents import agent_create, agent_publish
from models_app.models import ModelConnection
from models_app.services.connections import connection_learn, connection_update
from sessions_app.services import execution
from tests.factories import make_connection, make_run, make_session

pytestmark = pytest.mark.django_db

EVIDENCE = "maximum context length is 4096 tokens"


@pytest.fixture
def compatible(space):
    return make_connection(
        space,
        provider="openai_compatible",
        base_url="https://llm.example.com/v1",
        model_id="smollm2",
        context_window=32_768,
        max_output_tokens=1_024,
        safety_margin_tokens=256,
        window_source="platform_default",
    )


def publish(user, connection, name="agent"):
    agent = agent_create(
        user=user,
        space=connection.space,
        name=f"{name}-{connection.pk}",
        system_prompt="You are brief.",
        model_connection=connection.pk,
        tools=["echo"],
    )
    return agent_publish(user=user, agent=agent)


def learn(connection, user, value=4_096):
    connection_learn(
        connection_id=connection.pk,
        kind="context_window",
        value=value,
        evidence=EVIDENCE,
        user_id=user.pk,
        origin="a run",
    )


def test_an_old_version_runs_with_the_smaller_learned_window(alice, compatible):
    version = publish(alice, compatible)
    assert run_measures(version.snapshot)[1].context_window == 32_768
    learn(compatible, alice)
    # New runs of the old version: the learned window, below the frozen one.
    assert run_measures(version.snapshot)[1].context_window == 4_096
    assert version_binding(version)["budget"]["context_window"] == 4_096
    # A run's own binding wins (resume and replay see what the run saw).
    frozen = {"budget": dict(version.snapshot["budget"])}
    assert run_measures(version.snapshot, frozen)[1].context_window == 32_768
    assert run_measures(version.snapshot, learned=False)[1].context_window == 32_768


def test_a_learned_window_never_raises_a_frozen_budget(alice, compatible):
    version = publish(alice, compatible)
    # A window learned later on a larger server (recorded by hand here) is not used.
    ModelConnection.objects.filter(pk=compatible.pk).update(learned_window=65_536)
    assert run_measures(version.snapshot)[1].context_window == 32_768
    # Nor is one learned on a connection that now serves another model.
    ModelConnection.objects.filter(pk=compatible.pk).update(learned_window=4_096, model_id="other")
    assert run_measures(version.snapshot)[1].context_window == 32_768


def test_a_new_version_publishes_with_the_learned_window(alice, compatible):
    learn(compatible, alice)
    version = publish(alice, compatible, name="after")
    assert version.snapshot["budget"]["context_window"] == 4_096
    # A person who raises the window again overrides it for the versions published after.
    connection_update(user=alice, connection=compatible, context_window=8_192)
    assert publish(alice, compatible, name="edited").snapshot["budget"]["context_window"] == 8_192
    assert run_measures(version.snapshot)[1].context_window == 4_096  # frozen at 4,096


def test_the_run_hook_records_what_its_engine_learned(alice, compatible):
    version = publish(alice, compatible)
    run = make_run(make_session(version, alice), status="running")
    hooks, _writer = execution._hooks(run, "worker-1", None)
    hooks.on_learned(LearnedLimit("context_window", 4_096, EVIDENCE, refused=5_020))
    hooks.on_learned(LearnedLimit("reasoning", "tool_spans", "reasoning must be passed back"))
    compatible.refresh_from_db()
    assert (compatible.context_window, compatible.learned_window) == (4_096, 4_096)
    assert compatible.learned_reasoning == "tool_spans"
    entries = LogEntry.objects.filter(object_id=str(compatible.pk)).order_by("id")
    assert [entry.user for entry in entries] == [alice, alice]
    assert f"run #{run.number} of session {run.session_id}" in entries[0].change_message


def test_the_reasoning_rule_is_frozen_at_publish_and_given_to_the_gateway(alice, compatible):
    default = publish(alice, compatible, name="default")
    assert default.snapshot["reasoning"] is None
    assert gateway_for(default).reasoning == "learned"  # a compatible server's default
    connection_learn(
        connection_id=compatible.pk,
        kind="reasoning",
        value="tool_spans",
        evidence="reasoning_content must be passed back",
        user_id=alice.pk,
        origin="a run",
    )
    learned = publish(alice, compatible, name="learned")
    assert learned.snapshot["reasoning"] == "tool_spans"
    assert gateway_for(learned).reasoning == "tool_spans"
    # A version that froze none (learned) starts its runs from the rule the connection learned.
    assert gateway_for(default).reasoning == "tool_spans"
    connection_update(user=alice, connection=compatible, reasoning_passback="never")
    chosen = publish(alice, compatible, name="chosen")
    assert chosen.snapshot["reasoning"] == "never"  # a person's setting wins
    assert gateway_for(chosen).reasoning == "never"
    assert gateway_for(learned).reasoning == "tool_spans"  # what a version froze stays


def test_deepseek_keeps_its_own_rule_unless_set(alice, space):
    official = make_connection(
        space,
        provider="deepseek",
        base_url="https://api.deepseek.com",
        api_key="sk-test",
        model_id="deepseek-v4-flash",
    )
    version = publish(alice, official)
    assert version.snapshot["reasoning"] is None
    assert gateway_for(version).reasoning == "tool_spans"
    # Its runs keep DeepSeek's documented rule, whatever the connection recorded (by hand here).
    ModelConnection.objects.filter(pk=official.pk).update(learned_reasoning="never")
    assert gateway_for(version).reasoning == "tool_spans"


def test_nothing_is_recorded_on_a_connection_that_now_serves_another_model(alice, compatible):
    version = publish(alice, compatible)
    run = make_run(make_session(version, alice), status="running")
    ModelConnection.objects.filter(pk=compatible.pk).update(model_id="another")
    execution._hooks(run, "worker-1", None)[0].on_learned(
        LearnedLimit("context_window", 4_096, EVIDENCE)
    )
    compatible.refresh_from_db()
    assert compatible.learned_window is None and compatible.context_window == 32_768
    assert not LogEntry.objects.filter(object_id=str(compatible.pk)).exists()
