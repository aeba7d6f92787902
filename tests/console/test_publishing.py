"""Publishing from the pages: the admin's button and action, drafts and differences on the home."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from context_app.models import Agent
from context_app.selectors import draft_changes
from context_app.services import agent_update

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_alice(alice):
    """Alice as staff with the agent admin's permissions (she administers the space)."""
    alice.is_staff = True
    alice.save()
    alice.user_permissions.add(*Permission.objects.filter(content_type__app_label="context_app"))
    return alice


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
    form = {
        "space": agent.space_id,
        "owner": agent.owner_id,
        "name": agent.name,
        "system_prompt": "Newer prompt.",
        "model_connection": agent.model_connection_id,
        "tools": '["echo"]',
        "sub_agents": "[]",
        "context_policy": "null",
        "_publish": "Save and publish",
    }
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
