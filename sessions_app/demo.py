"""The demo every local installation starts with: a space, the offline model, a published agent.

It sits in the top layer because it uses every app below (spaces, model connections, agents).
The demo model's window is deliberately small so that a compaction happens within a few
questions, which is the point of the demo.
"""

from django.db import transaction

from agentloom.engine import BUILTIN_TOOL_NAMES
from agentloom.spaces.models import Membership, Space
from context_app.models import Agent
from context_app.services.agents import agent_create, agent_publish
from models_app.models import ModelConnection
from models_app.services.connections import connection_create

DEMO_SPACE_NAME = "Demo space"
DEMO_CONNECTION_NAME = "Local demo model"
DEMO_AGENT_NAME = "Demo agent"
DEMO_SYSTEM_PROMPT = (
    "You are the AgentLoom demo agent. Use the tools when asked and cite their results."
)
# Every built-in tool, the plan included: README's walkthrough uses each of them.
DEMO_TOOLS = list(BUILTIN_TOOL_NAMES)
# The demo model's window, in bytes (its estimator): small, so that compaction shows within a
# few questions, and large enough that every tool offered (search_history and read_record
# included) leaves a question 1,824 bytes (8,192 left 514, just above the floor of 512).
DEMO_CONTEXT_WINDOW = 10_240
DEMO_SUB_AGENTS = [
    {
        "name": "researcher",
        "description": "Looks things up with echo and calculator and reports back.",
        "system_prompt": "You are a careful researcher. Report only what your tools returned.",
        "tools": ["echo", "calculator"],
    }
]


def ensure_demo(*, owner) -> Space:
    """Return the demo space, creating its connection and published agent on first call.

    Each step is a transaction of its own (the connection and the publication are durable
    actions) and is skipped once done, so a bootstrap stopped halfway completes on the next call.
    """
    with transaction.atomic(durable=True):
        space = Space.objects.filter(name=DEMO_SPACE_NAME).order_by("id").first()
        if space is None:
            space = Space.objects.create(name=DEMO_SPACE_NAME)
        Membership.objects.get_or_create(
            space=space, user=owner, defaults={"role": Membership.Role.ADMIN}
        )
    connection = ModelConnection.objects.filter(space=space, name=DEMO_CONNECTION_NAME).first()
    if connection is None:
        connection = connection_create(
            user=owner,
            space=space,
            name=DEMO_CONNECTION_NAME,
            provider=ModelConnection.Provider.LOCAL,
            model_id="local-demo",
            context_window=DEMO_CONTEXT_WINDOW,
            max_output_tokens=512,
            safety_margin_tokens=256,
            window_source=ModelConnection.WindowSource.MANUAL,
        )
    agent = Agent.objects.filter(space=space, name=DEMO_AGENT_NAME).first()
    if agent is None:
        agent = agent_create(
            user=owner,
            space=space,
            name=DEMO_AGENT_NAME,
            system_prompt=DEMO_SYSTEM_PROMPT,
            model_connection=connection.pk,
            tools=DEMO_TOOLS,
            sub_agents=DEMO_SUB_AGENTS,
        )
    if not agent.versions.exists():
        agent_publish(user=owner, agent=agent)
    return space
