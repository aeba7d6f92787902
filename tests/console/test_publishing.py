"""Publishing from the pages: the admin's button and action, drafts and differences on the home."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from context_app.models import Agent
from context_app.selectors import draft_changes
from context_app.services.agents import agent_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_alice(alice):
    """Alice as staff with the agent admin's permissions (she administers the space)."""
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(*Permission.objects.filter(content_type__app_label="context_app"))
    return alice


def agent_form(agent, **overrides) -> dict:
    """Return the admin form's POST data for `agent` as it is, with `overrides`."""
    data = {
        "space": agent.space_id,
        "owner": agent.owner_id,
        "name": agent.name,
        "system_prompt": agent.system_prompt,
        "model_connection": agent.model_connection_id or "",
        "tools": list(agent.tools),
        **{key: "" if value is None else value for key, value in agent.context_policy.items()},
    }
    for index, sub in enumerate(agent.sub_agents):
        for key in ("name", "description", "system_prompt"):
            data[f"sub_agents-{index}-{key}"] = sub[key]
        data[f"sub_agents-{index}-tools"] = sub["tools"]
    if agent.verify_completion:
        data["verify_completion"] = "on"
    data.update(overrides)
    return data


def test_a_fresh_version_has_no_differences_and_edits_are_named(version, alice):
    agent = version.agent
    assert draft_changes(agent, version) == []
    agent = agent_update(user=alice, agent=agent, tools=["echo"], system_prompt="Be brief.")
    assert draft_changes(agent, version) == ["system_prompt", "tools"]
    agent = agent_update(user=alice, agent=agent, context_policy={"context_ratio": 0.7})
    assert draft_changes(agent, version) == ["system_prompt", "tools", "context_policy"]


def test_a_connection_budget_change_counts_as_a_difference(version):
    agent = version.agent
    agent.model_connection.max_output_tokens = 1234
    agent.model_connection.save()
    assert draft_changes(Agent.objects.get(pk=agent.pk), version) == ["model_connection"]


def test_the_home_lists_drafts_and_differences(client_for, version, staff_alice, carol, space):
    draft = Agent.objects.create(space=space, owner=staff_alice, name="Unpublished")
    agent_update(user=staff_alice, agent=version.agent, tools=["echo"])

    page = client_for(staff_alice).get("/").content.decode()
    assert "Unpublished" in page
    assert "Not published yet." in page
    assert reverse("admin:context_app_agent_change", args=[draft.pk]) in page
    assert "Draft differs from v1: tools." in page

    # A plain member sees the hint without the admin link, and no "New session" for a draft.
    page = client_for(carol).get("/").content.decode()
    assert "Not published yet. A space admin publishes it." in page
    assert reverse("admin:context_app_agent_change", args=[draft.pk]) not in page


def test_the_admin_publish_button_saves_then_publishes(client_for, version, staff_alice):
    agent = version.agent
    client = client_for(staff_alice)
    url = reverse("admin:context_app_agent_change", args=[agent.pk])
    assert "Save and publish" in client.get(url).content.decode()
    form = agent_form(agent, system_prompt="Newer prompt.", _publish="Save and publish")
    response = client.post(url, form, follow=True)
    assert response.redirect_chain[-1][0] == url
    text = response.content.decode()
    assert "Published Helper as v2." in text
    assert agent.versions.count() == 2
    assert agent.versions.get(number=2).snapshot["system_prompt"] == "Newer prompt."
    assert "Published as v2; the draft is the same." in text


def test_the_admin_list_action_publishes_and_names_refusals(
    client_for, version, staff_alice, space
):
    lonely = Agent.objects.create(space=space, owner=staff_alice, name="No connection")
    response = client_for(staff_alice).post(
        reverse("admin:context_app_agent_changelist"),
        {
            "action": "publish_selected",
            "_selected_action": [version.agent_id, lonely.pk],
        },
        follow=True,
    )
    text = response.content.decode()
    assert "Published Helper as v2." in text
    assert "No connection not published (model connection): Choose a model connection" in text
    assert version.agent.versions.count() == 2
    assert not lonely.versions.exists()


# --- the agent form ------------------------------------------------------------------------------


def _errors_of(response) -> dict:
    form = response.context["adminform"].form
    return {name: list(errors) for name, errors in form.errors.items()}


def test_a_new_agent_shows_the_default_policy_and_tool_descriptions(client_for, staff_alice, space):
    html = client_for(staff_alice).get(reverse("admin:context_app_agent_add")).content.decode()
    assert 'name="context_ratio" value="0.8"' in html
    assert 'name="target_ratio" value="0.6"' in html
    assert 'name="max_compaction_calls" value="4"' in html
    assert 'name="mask_batch_ratio" value="0.1"' in html
    assert "Default: 0.8." in html and "Default: blank (never)." in html
    assert 'type="checkbox" name="tools" value="echo"' in html
    assert "echo — Return the given text unchanged." in html
    assert 'id="sub-agents-editor"' in html
    assert "null" not in html.split('id="agent_form"')[1].split("</form>")[0]


def test_the_form_round_trips_tools_sub_agents_and_policy(client_for, version, staff_alice):
    agent = version.agent
    url = reverse("admin:context_app_agent_change", args=[agent.pk])
    data = agent_form(
        agent,
        tools=["echo", "calculator"],
        user_turns="5",
        target_ratio="0.5",
        **{
            "sub_agents-0-remove": "1",  # the researcher goes
            "sub_agents-1-name": "writer",
            "sub_agents-1-description": "Writes it up.",
            "sub_agents-1-system_prompt": "Write.",
            "sub_agents-1-tools": ["echo"],
        },
    )
    response = client_for(staff_alice).post(url, data)
    assert response.status_code == 302, _errors_of(response)
    agent.refresh_from_db()
    assert agent.tools == ["echo", "calculator"]
    assert agent.sub_agents == [
        {
            "name": "writer",
            "description": "Writes it up.",
            "system_prompt": "Write.",
            "tools": ["echo"],
        }
    ]
    assert agent.context_policy == {
        "context_ratio": 0.8,
        "target_ratio": 0.5,
        "user_turns": 5,
        "model_steps": None,
        "max_compaction_calls": 4,
        "mask_batch_ratio": 0.1,
    }
    html = client_for(staff_alice).get(url).content.decode()
    assert 'value="writer"' in html and 'name="user_turns" value="5"' in html


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"target_ratio": "0.9"}, "target_ratio", "Target share must be below the trigger share."),
        ({"context_ratio": "1.5"}, "context_ratio", "Trigger share must be a number in (0, 1]."),
        (
            {"max_compaction_calls": "40"},
            "max_compaction_calls",
            "Calls per compaction must be an integer from 1 to 16.",
        ),
        (
            {"user_turns": "0"},
            "user_turns",
            "Every N user turns must be a positive integer or blank.",
        ),
        (
            {"sub_agents-0-name": "Bad Name"},
            "sub_agents",
            "Sub-agent 1: Sub-agent names use lower-case letters, digits and underscores, "
            "starting with a letter",
        ),
        ({"name": "   "}, "name", "This field is required."),
    ],
)
def test_a_refusal_is_shown_on_its_field(client_for, version, staff_alice, change, field, message):
    agent = version.agent
    url = reverse("admin:context_app_agent_change", args=[agent.pk])
    response = client_for(staff_alice).post(url, agent_form(agent, **change))
    assert response.status_code == 200
    errors = _errors_of(response)
    assert list(errors) == [field], errors
    assert errors[field][0].startswith(message), errors
    agent.refresh_from_db()
    assert agent.context_policy == version.snapshot["context_policy"]


def test_the_agent_page_shows_the_room_for_a_question_and_publishing_refuses_too_little(
    client, staff_alice, space
):
    from agentloom.engine import BUILTIN_TOOL_NAMES, DEFAULT_POLICY
    from context_app.models import AgentVersion
    from tests.factories import make_connection

    small = make_connection(
        space, context_window=6_144, max_output_tokens=512, safety_margin_tokens=256
    )
    agent = Agent.objects.create(
        space=space,
        owner=staff_alice,
        name="Crowded",
        model_connection=small,
        tools=list(BUILTIN_TOOL_NAMES),
        context_policy=dict(DEFAULT_POLICY),
    )
    client.force_login(staff_alice)
    url = f"/admin/context_app/agent/{agent.pk}/change/"
    page = client.get(url).content.decode()
    assert "Room for a question" in page and "below the floor" in page

    answer = client.post(url, agent_form(agent, _publish="1"), follow=True).content.decode()
    assert "not published (question room)" in answer and "floor of 512" in answer
    assert re.search(r"\(trigger \d,\d{3} - system prompt and tool schemas \d,\d{3} -", answer)
    assert not AgentVersion.objects.filter(agent=agent).exists()


def test_the_agent_form_says_every_fault_at_once_and_outlines_only_faulty_rows(
    client_for, version, staff_alice
):
    agent = version.agent
    url = reverse("admin:context_app_agent_change", args=[agent.pk])
    change = {
        "target_ratio": "0.9",
        "context_ratio": "0.5",
        "max_compaction_calls": "40",
        "sub_agents-1-name": "Bad Name",
        "sub_agents-1-description": "second",
    }
    response = client_for(staff_alice).post(url, agent_form(agent, **change))
    errors = _errors_of(response)
    assert errors == {
        "target_ratio": ["Target share must be below the trigger share."],
        "max_compaction_calls": ["Calls per compaction must be an integer from 1 to 16."],
        "sub_agents": [
            "Sub-agent 2: Sub-agent names use lower-case letters, digits and underscores, "
            "starting with a letter (at most 40 characters)."
        ],
    }, errors
    html = response.content.decode()
    assert 'class="sub-agent-row row-error" data-row="1"' in html
    assert 'class="sub-agent-row" data-row="0"' in html
    assert "context_ratio" not in str(errors)


def test_the_agent_page_separates_the_thousands_of_the_room_for_a_question(
    client, staff_alice, space
):
    from tests.factories import make_connection

    roomy = make_connection(space, context_window=64_000)
    agent = Agent.objects.create(
        space=space, owner=staff_alice, name="Roomy", model_connection=roomy, tools=["echo"]
    )
    client.force_login(staff_alice)
    page = client.get(reverse("admin:context_app_agent_change", args=[agent.pk])).text
    room = re.search(r"([\d,]+) of a trigger at ([\d,]+) \(system prompt and tool schemas", page)
    assert room is not None, page
    assert [int(figure.replace(",", "")) >= 1_000 for figure in room.groups()] == [True, True]
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})+", figure) for figure in room.groups()), room[0]
