"""Agents: drafts with a merged and validated context policy, sub-agents, publishing."""

from __future__ import annotations

import math

import pytest

from agentloom.engine import DEFAULT_POLICY
from context_app.models import Agent, AgentVersion
from tests.api.factories import client_for, make_agent, publish
from tests.factories import make_connection

pytestmark = pytest.mark.django_db

AGENT_FIELDS = {
    "id",
    "space",
    "owner",
    "name",
    "system_prompt",
    "model_connection",
    "question_room",
    "tools",
    "approval",
    "sub_agents",
    "verify_completion",
    "context_policy",
    "created_at",
    "updated_at",
}


@pytest.fixture
def connection(space):
    return make_connection(space)


def _create(client, space, **fields):
    return client.post("/api/v1/agents/", {"space": space.pk, "name": "Scout", **fields}, "json")


# --- create ------------------------------------------------------------------------------------


def test_create_writes_the_default_policy(api, space, alice, connection):
    response = _create(api, space, model_connection=connection.pk, tools=["echo"])
    assert response.status_code == 201
    body = response.json()
    assert set(body) == AGENT_FIELDS
    assert body["context_policy"] == DEFAULT_POLICY
    assert body["owner"] == alice.pk
    assert body["tools"] == ["echo"]
    assert Agent.objects.get(pk=body["id"]).context_policy == DEFAULT_POLICY


def test_create_merges_a_partial_policy_over_the_defaults(api, space):
    response = _create(api, space, context_policy={"context_ratio": 0.9, "user_turns": 3})
    assert response.status_code == 201
    assert response.json()["context_policy"] == {
        **DEFAULT_POLICY,
        "context_ratio": 0.9,
        "user_turns": 3,
    }


def test_create_with_a_null_policy_gets_the_defaults(api, space):
    response = _create(api, space, context_policy=None)
    assert response.status_code == 201
    assert response.json()["context_policy"] == DEFAULT_POLICY


@pytest.mark.parametrize(
    "policy",
    [
        {"context_ratio": 0},
        {"context_ratio": -0.1},
        {"context_ratio": 1.5},
        {"context_ratio": "0.8"},
        {"context_ratio": True},
        {"target_ratio": 0},
        {"target_ratio": 0.8},
        {"target_ratio": 0.9},
        {"context_ratio": 0.5, "target_ratio": 0.6},
        {"target_ratio": 1.2},
        {"user_turns": 0},
        {"user_turns": -1},
        {"user_turns": 1.5},
        {"user_turns": "3"},
        {"model_steps": 0},
        {"model_steps": False},
        {"max_compaction_calls": 0},
        {"max_compaction_calls": 17},
        {"max_compaction_calls": None},
        {"budget_ratio": 0.5},
        "compact often",
        [0.8, 0.6],
        12,
    ],
)
def test_invalid_policies_are_refused_naming_the_field(api, space, policy):
    response = _create(api, space, context_policy=policy)
    assert response.status_code == 400
    assert list(response.json()) == ["context_policy"]
    assert not Agent.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": 3}, "name"),
        ({"name": "x" * 121}, "name"),
        ({"system_prompt": 5}, "system_prompt"),
        ({"system_prompt": "x" * 100_001}, "system_prompt"),
        ({"tools": ["teleport"]}, "tools"),
        ({"tools": "echo"}, "tools"),
        ({"tools": [1]}, "tools"),
        ({"verify_completion": "yes"}, "verify_completion"),
        ({"verify_completion": 1}, "verify_completion"),
        ({"model_connection": "1"}, "model_connection"),
        ({"model_connection": 0}, "model_connection"),
        ({"model_connection": 2**63}, "model_connection"),
        ({"temperature": 0.2}, "temperature"),
        ({"sub_agents": "helper"}, "sub_agents"),
    ],
)
def test_create_refuses_bad_fields(api, space, fields, field):
    response = _create(api, space, **fields)
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("missing", ["space", "name"])
def test_create_requires_space_and_name(api, space, missing):
    body = {"space": space.pk, "name": "Scout"}
    del body[missing]
    response = api.post("/api/v1/agents/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == [missing]


def test_a_connection_of_another_space_is_refused(api, space, other_space):
    foreign = make_connection(other_space)
    response = _create(api, space, model_connection=foreign.pk)
    assert response.status_code == 400
    assert list(response.json()) == ["model_connection"]


def test_a_member_may_not_create_agents(space, carol):
    assert _create(client_for(carol), space).status_code == 403
    assert not Agent.objects.exists()


def test_creating_in_a_space_outside_reach_is_404(api, other_space):
    assert _create(api, other_space).status_code == 404
    assert not Agent.objects.exists()


# --- sub-agents --------------------------------------------------------------------------------

RESEARCHER = {
    "name": "researcher",
    "description": "Looks things up.",
    "system_prompt": "Be thorough.",
    "tools": ["calculator"],
}


def test_sub_agents_are_stored_with_exactly_their_four_fields(api, space):
    response = _create(api, space, sub_agents=[RESEARCHER, {"name": "scribe"}])
    assert response.status_code == 201
    assert response.json()["sub_agents"] == [
        RESEARCHER,
        {"name": "scribe", "description": "", "system_prompt": "", "tools": []},
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"model_connection": 1},
        {"model_id": "gpt-4o"},
        {"model": "gpt-4o"},
        {"context_policy": {"context_ratio": 0.5}},
        {"context_window": 8000},
    ],
)
def test_a_sub_agent_with_a_model_or_policy_field_is_refused(api, space, extra):
    response = _create(api, space, sub_agents=[{**RESEARCHER, **extra}])
    assert response.status_code == 400
    assert list(response.json()) == ["sub_agents"]
    assert "parent's model and context policy" in str(response.json())


@pytest.mark.parametrize(
    "sub_agents",
    [
        [{**RESEARCHER, "name": "Researcher"}],
        [{**RESEARCHER, "name": "has space"}],
        [{**RESEARCHER, "name": ""}],
        [{"description": "no name"}],
        [RESEARCHER, RESEARCHER],
        [{**RESEARCHER, "tools": ["teleport"]}],
        [{**RESEARCHER, "name": f"sub{n}"} for n in range(9)],
        ["researcher"],
    ],
)
def test_invalid_sub_agents_are_refused(api, space, sub_agents):
    response = _create(api, space, sub_agents=sub_agents)
    assert response.status_code == 400
    assert list(response.json()) == ["sub_agents"]


# --- read and update ---------------------------------------------------------------------------


def test_members_read_agents_of_their_space_only(space, other_space, carol, bob, alice):
    agent = make_agent(space, alice)
    make_agent(other_space, bob, name="theirs")
    client = client_for(carol)
    listed = client.get("/api/v1/agents/").json()
    assert [a["id"] for a in listed["results"]] == [agent.pk]
    assert client.get(f"/api/v1/agents/{agent.pk}/").json()["name"] == "helper"
    assert client_for(bob).get(f"/api/v1/agents/{agent.pk}/").status_code == 404


def test_patch_changes_the_draft_and_keeps_the_stored_policy(api, agent):
    api.patch(f"/api/v1/agents/{agent.pk}/", {"context_policy": {"user_turns": 4}}, "json")
    response = api.patch(f"/api/v1/agents/{agent.pk}/", {"system_prompt": "Be brief."}, "json")
    assert response.status_code == 200
    body = response.json()
    assert body["system_prompt"] == "Be brief."
    assert body["context_policy"] == {**DEFAULT_POLICY, "user_turns": 4}


def test_patch_merges_a_partial_policy_over_the_defaults(api, agent):
    api.patch(f"/api/v1/agents/{agent.pk}/", {"context_policy": {"user_turns": 4}}, "json")
    response = api.patch(
        f"/api/v1/agents/{agent.pk}/", {"context_policy": {"model_steps": 9}}, "json"
    )
    assert response.json()["context_policy"] == {**DEFAULT_POLICY, "model_steps": 9}


def test_a_draft_saved_without_a_policy_gets_the_defaults(api, agent):
    Agent.objects.filter(pk=agent.pk).update(context_policy=None)
    response = api.patch(f"/api/v1/agents/{agent.pk}/", {"name": "Renamed"}, "json")
    assert response.json()["context_policy"] == DEFAULT_POLICY
    agent.refresh_from_db()
    assert agent.context_policy == DEFAULT_POLICY


def test_patch_refuses_invalid_input_and_changes_nothing(api, agent):
    response = api.patch(
        f"/api/v1/agents/{agent.pk}/",
        {"name": "New", "context_policy": {"target_ratio": 0.95}},
        "json",
    )
    assert response.status_code == 400
    assert list(response.json()) == ["context_policy"]
    agent.refresh_from_db()
    assert agent.name == "helper"


def test_patch_refuses_unknown_fields(api, agent):
    response = api.patch(f"/api/v1/agents/{agent.pk}/", {"owner": 5}, "json")
    assert response.status_code == 400
    assert list(response.json()) == ["owner"]


def test_another_admin_of_the_space_may_edit(agent, erin):
    response = client_for(erin).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Erin's"}, "json")
    assert response.status_code == 200


def test_a_member_may_not_edit(agent, carol):
    response = client_for(carol).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Mine"}, "json")
    assert response.status_code == 403
    agent.refresh_from_db()
    assert agent.name == "helper"


def test_outsiders_may_not_edit(agent, bob):
    response = client_for(bob).patch(f"/api/v1/agents/{agent.pk}/", {"name": "Mine"}, "json")
    assert response.status_code == 404


def test_put_is_not_allowed(api, agent):
    response = api.put(f"/api/v1/agents/{agent.pk}/", {"name": "x"}, "json")
    assert response.status_code == 405
    assert "PATCH" in response["Allow"]


# --- publishing --------------------------------------------------------------------------------


def test_publish_creates_the_next_frozen_version(api, agent):
    first = api.post(f"/api/v1/agents/{agent.pk}/publish")
    second = api.post(f"/api/v1/agents/{agent.pk}/publish/")
    assert (first.status_code, second.status_code) == (201, 201)
    body = first.json()
    assert set(body) == {"id", "agent", "number", "snapshot"}
    assert (body["agent"], body["number"], second.json()["number"]) == (agent.pk, 1, 2)
    snapshot = body["snapshot"]
    assert snapshot["system_prompt"] == "You are helpful."
    assert snapshot["context_policy"] == DEFAULT_POLICY
    assert snapshot["budget"]["context_window"] == agent.model_connection.context_window
    assert snapshot["estimator"]["module_id"].startswith("agentloom.engine.budget")


def test_publish_without_a_connection_is_400(api, space, alice):
    agent = make_agent(space, alice, model_connection=None)
    response = api.post(f"/api/v1/agents/{agent.pk}/publish")
    assert response.status_code == 400
    assert list(response.json()) == ["model_connection"]
    assert not AgentVersion.objects.exists()


def test_a_member_may_not_publish(agent, carol):
    assert client_for(carol).post(f"/api/v1/agents/{agent.pk}/publish").status_code == 403
    assert not AgentVersion.objects.exists()


def test_outsiders_may_not_publish(agent, bob):
    assert client_for(bob).post(f"/api/v1/agents/{agent.pk}/publish").status_code == 404


def test_versions_are_listed_newest_first_to_members(agent, alice, carol, bob):
    publish(agent, alice)
    publish(agent, alice)
    page = client_for(carol).get(f"/api/v1/agents/{agent.pk}/versions/").json()
    assert page["count"] == 2
    assert [v["number"] for v in page["results"]] == [2, 1]
    assert client_for(bob).get(f"/api/v1/agents/{agent.pk}/versions/").status_code == 404


def test_publishing_freezes_the_version(api, agent, alice):
    """Edits to the draft and its connection after publishing leave the version as it was."""
    v1 = api.post(f"/api/v1/agents/{agent.pk}/publish").json()
    frozen = dict(v1["snapshot"])

    api.patch(
        f"/api/v1/agents/{agent.pk}/",
        {
            "system_prompt": "Changed.",
            "context_policy": {"context_ratio": 0.5, "target_ratio": 0.4},
        },
        "json",
    )
    connection = agent.model_connection
    connection.context_window = 65_536
    connection.save()

    versions = api.get(f"/api/v1/agents/{agent.pk}/versions/").json()["results"]
    assert versions[0]["snapshot"] == frozen
    session_v1 = api.post("/api/v1/sessions/", {"agent_version": v1["id"]}, "json").json()
    assert AgentVersion.objects.get(pk=session_v1["agent_version"]).snapshot == frozen

    v2 = api.post(f"/api/v1/agents/{agent.pk}/publish").json()
    assert v2["snapshot"]["system_prompt"] == "Changed."
    assert v2["snapshot"]["context_policy"]["context_ratio"] == 0.5
    assert v2["snapshot"]["budget"]["context_window"] == 65_536

    # A new session on the agent takes the newest version, and runs measure with its values.
    session_v2 = api.post("/api/v1/sessions/", {"agent": agent.pk}, "json").json()
    assert session_v2["agent_version"] == v2["id"]
    run = api.post(f"/api/v1/sessions/{session_v2['id']}/runs", {"question": "Hi"}, "json").json()
    context = api.get(f"/api/v1/runs/{run['id']}/context").json()
    assert context["effective_budget"] == 65_536 - 4_096 - 1_024
    assert context["trigger_at"] == int((65_536 - 4_096 - 1_024) * 0.5)
    old_run = api.post(f"/api/v1/sessions/{session_v1['id']}/runs", {"question": "Hi"}, "json")
    old_context = api.get(f"/api/v1/runs/{old_run.json()['id']}/context").json()
    assert old_context["effective_budget"] == 32_768 - 4_096 - 1_024
    assert old_context["trigger_at"] == math.ceil((32_768 - 4_096 - 1_024) * 0.8)


def test_publish_refuses_an_agent_without_room_for_a_question(api, space, alice):
    from agentloom.engine import BUILTIN_TOOL_NAMES
    from agentloom.engine._measure import QUESTION_ROOM_FLOOR

    small = make_connection(
        space, context_window=6_144, max_output_tokens=512, safety_margin_tokens=256
    )
    agent = make_agent(space, alice, model_connection=small, tools=list(BUILTIN_TOOL_NAMES))

    room = api.get(f"/api/v1/agents/{agent.pk}/").json()["question_room"]
    assert room["floor"] == QUESTION_ROOM_FLOOR and room["room"] < room["floor"]
    parts = ("system_prompt_and_tools", "plan_reserve", "summary_limit", "large_record_limit")
    assert room["room"] == room["trigger_at"] - sum(room[part] for part in parts)

    response = api.post(f"/api/v1/agents/{agent.pk}/publish")
    assert response.status_code == 400
    (detail,) = response.json()["question_room"]
    assert f"room for a question is {room['room']}" in detail
    assert f"floor of {QUESTION_ROOM_FLOOR}" in detail
    assert not AgentVersion.objects.filter(agent=agent).exists(), "nothing was published"

    # Fewer tools leave the room, and the same draft publishes.
    api.patch(f"/api/v1/agents/{agent.pk}/", {"tools": ["echo"]}, "json")
    assert api.get(f"/api/v1/agents/{agent.pk}/").json()["question_room"]["room"] >= 512
    assert api.post(f"/api/v1/agents/{agent.pk}/publish").status_code == 201
