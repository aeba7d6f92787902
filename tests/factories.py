"""Small factories for tests: each returns a saved row with sensible defaults."""

from __future__ import annotations

import itertools

from django.contrib.auth import get_user_model

_counter = itertools.count(1)


def make_user(username: str | None = None, *, superuser: bool = False, staff: bool = False):
    username = username or f"user{next(_counter)}"
    model = get_user_model()
    if superuser:
        return model.objects.create_superuser(username=username, password="pw-" + username)
    return model.objects.create_user(username=username, password="pw-" + username, is_staff=staff)


def make_space(*, name: str = "Space", admin=None, members=()):
    from agentloom.spaces.models import Membership, Space

    space = Space.objects.create(name=name)
    if admin is not None:
        Membership.objects.create(space=space, user=admin, role=Membership.Role.ADMIN)
    for user in members:
        Membership.objects.create(space=space, user=user, role=Membership.Role.MEMBER)
    return space


def make_connection(space, **fields):
    from models_app.models import ModelConnection

    defaults = {
        "name": f"conn{next(_counter)}",
        "provider": ModelConnection.Provider.LOCAL,
        "base_url": "",
        "api_key": "",
        "model_id": "local-demo",
    }
    defaults.update(fields)
    return ModelConnection.objects.create(space=space, **defaults)


def make_agent(space, owner, *, connection=None, **fields):
    from context_app.models import Agent

    defaults = {"name": f"agent{next(_counter)}", "system_prompt": "You are helpful."}
    defaults.update(fields)
    return Agent.objects.create(space=space, owner=owner, model_connection=connection, **defaults)


def make_version(agent, *, snapshot=None, number=None):
    from context_app.models import AgentVersion

    number = number or (agent.versions.count() + 1)
    return AgentVersion.objects.create(
        agent=agent,
        number=number,
        snapshot=snapshot or {"system_prompt": agent.system_prompt},
        model_connection=agent.model_connection,
    )


def make_session(version, user):
    from sessions_app.models import Session

    return Session.objects.create(
        space=version.agent.space, agent=version.agent, agent_version=version, created_by=user
    )


def make_run(session, *, status="queued", number=None, question="What is 2+2?", **fields):
    """A run row written directly, without the journal: a finished one stands for a run from
    before the journal existed, so its session is marked as one of that time (a new question
    looks for such runs and adopts them)."""
    from sessions_app.models import Run, Session

    number = number or (session.runs.count() + 1)
    run = Run.objects.create(
        session=session, number=number, status=status, question=question, **fields
    )
    if status in Run.FINISHED_STATUSES:
        Session.objects.filter(pk=session.pk).update(runs_journaled=False)
        session.runs_journaled = False
    return run


def published_session(
    user, space, connection, *, name: str, title: str, system_prompt="You help.", tools=("echo",)
):
    """Return a new session of an agent on `connection`, created and published through the
    services as an admin does, with `tools` and the default context policy."""
    from context_app.services.agents import agent_create, agent_publish
    from sessions_app.services.runs import session_create

    agent = agent_create(
        user=user,
        space=space,
        name=name,
        system_prompt=system_prompt,
        model_connection=connection.pk,
        tools=list(tools),
        sub_agents=[],
        context_policy=None,
    )
    version = agent_publish(user=user, agent=agent)
    return session_create(user=user, agent_version=version, title=title)


def ask(session, user, question):
    """Ask `question` and execute the run to its end in this process; return the run."""
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    run = run_ask(user=user, session=session, question=question)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


def approval_session(user, space, url: str, tools: list[str], approval=None):
    """Return a session of an agent using the tools of an MCP server at `url` whose default
    approval mode is `always` (`approval` overrides it per tool)."""
    from context_app.services.agents import agent_create, agent_publish
    from models_app.services.tool_servers import tool_server_create, tool_server_refresh
    from sessions_app.services.runs import session_create

    server = tool_server_create(user=user, space=space, name="demo", url=url, approval="always")
    tool_server_refresh(user=user, server=server)
    agent = agent_create(
        user=user,
        space=space,
        name="Careful",
        model_connection=make_connection(space).pk,
        tools=tools,
        **({"approval": approval} if approval is not None else {}),
    )
    return session_create(user=user, agent_version=agent_publish(user=user, agent=agent))
