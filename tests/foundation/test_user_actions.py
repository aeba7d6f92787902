"""Every user action is durable: one outermost transaction, an error inside another atomic block.

A user action is a write that the API, the console, the admin or a management command asks of a
service. `ACTIONS` lists them all, and each one, called inside `transaction.atomic()`, must
refuse. Two guards keep the list whole: every service function that those callers import is an
action or is in `NOT_ACTIONS` with the reason it is not one; and so is every public function of
the services modules whose name starts with an entity of the actions (`session_…`, `run_…`).
`<action>_nested` is an action's write as part of the caller's transaction (the admin's pages).
"""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil
import re
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from django.db import transaction

from agentloom.spaces.models import ApiToken
from models_app.models import ModelConnection, ToolServer
from sessions_app.demo import ensure_demo
from sessions_app.services.export import export_lines
from tests.factories import make_run, make_session, make_user

# The packages that hold the services' writes, one per app (each stands for all of its modules);
# the import contract "selectors import no services" forbids the same ones.
SERVICE_MODULES = (
    "agentloom.spaces.services",
    "context_app.services",
    "models_app.services",
    "sessions_app.services",
)
# Modules that hold reads; searched too, so that a read moved there is still found by name.
SELECTOR_MODULES = (
    "agentloom.spaces.selectors",
    "context_app.selectors",
    "models_app.selectors",
    "sessions_app.selectors",
)
# The apps whose API views, console, admin and management commands call the services.
APPS = ("agentloom", "context_app", "models_app", "sessions_app")
CALLER = re.compile(r"(^|_)(api|admin|console|commands)($|_)")

# Each user action (`act`), called as its callers call it in the world `w` of the `world` fixture.
ACTIONS = {
    "space_create": lambda act, w: act(user=w.alice, name="Another"),
    "member_add": lambda act, w: act(
        actor=w.alice, space=w.space, username=w.bob.username, role="member"
    ),
    "token_create": lambda act, w: act(user=w.alice, name="ci"),
    "token_revoke": lambda act, w: act(user=w.alice, token=w.token),
    "connection_create": lambda act, w: act(
        user=w.alice,
        space=w.space,
        name="another",
        provider=ModelConnection.Provider.LOCAL,
        model_id="local-demo",
    ),
    "connection_update": lambda act, w: act(user=w.alice, connection=w.connection, name="renamed"),
    "connection_delete": lambda act, w: act(user=w.alice, connection=w.connection),
    "tool_server_create": lambda act, w: act(
        user=w.alice, space=w.space, name="more", url="https://tools.example.com/more"
    ),
    "tool_server_update": lambda act, w: act(user=w.alice, server=w.server, name="renamed"),
    "tool_server_delete": lambda act, w: act(user=w.alice, server=w.server),
    "tool_server_refresh": lambda act, w: act(user=w.alice, server=w.server),
    "tool_server_list_new": lambda act, w: act(user=w.alice, server=w.server),
    "oauth_connect_start": lambda act, w: act(
        user=w.alice, server=w.server, session_key="k", origin="http://testserver"
    ),
    "oauth_connect_finish": lambda act, w: act(user=w.alice, session_key="k", state="s", code="c"),
    "oauth_disconnect": lambda act, w: act(user=w.alice, server=w.server),
    "agent_create": lambda act, w: act(user=w.alice, space=w.space, name="Another"),
    "agent_update": lambda act, w: act(user=w.alice, agent=w.agent, name="Renamed"),
    "agent_publish": lambda act, w: act(user=w.alice, agent=w.agent),
    "session_create": lambda act, w: act(user=w.alice, agent_version=w.version),
    "session_rename": lambda act, w: act(user=w.alice, session=w.session, title="New"),
    "session_delete": lambda act, w: act(user=w.alice, session=w.session),
    "session_purge": lambda act, w: act(user=w.root, session_id=w.session.pk),
    "view_revoke": lambda act, w: act(user=w.alice, session=w.session, revision=1),
    "run_ask": lambda act, w: act(user=w.alice, session=w.session, question="Why?"),
    "run_resume": lambda act, w: act(user=w.alice, run=w.run),
    "run_cancel": lambda act, w: act(user=w.alice, run=w.run),
    "run_decide": lambda act, w: act(user=w.alice, run=w.run, call_id="c1", decision="allow"),
    "run_answer": lambda act, w: act(user=w.alice, run=w.run, key="k1", action="accept"),
    "supplement_add": lambda act, w: act(user=w.alice, run=w.run, text="more"),
    "session_export": lambda act, w: act(user=w.alice, session=w.session),
    "session_export_by_operator": lambda act, w: act(user=w.root, session_id=w.session.pk),
    "session_fork": lambda act, w: act(user=w.alice, session=w.session, seq=1),
    "session_legal_hold": lambda act, w: act(user=w.alice, session=w.session, hold=True),
    "retention_set": lambda act, w: act(user=w.alice, space=w.space, days=30),
    "session_pin": lambda act, w: act(user=w.alice, session=w.session, text="Be brief."),
    "session_import": lambda act, w: act(
        user=w.alice,
        space=w.space,
        stream=io.BytesIO(b"".join(export_lines(w.session, format="jsonl", exported_by="alice"))),
    ),
}

# Service functions that callers use or that are named after an entity, but write nothing a user
# asked for: the reason each one is not a user action.
READ = "reads, writes nothing"
VALIDATES = "checks input as the write would, writes nothing"
OUTBOUND = "calls the provider for the model page, writes nothing"
WORKER = "a step of the worker's or a sweep's, not a user's request"
NOT_ACTIONS = {
    "agent_question_room": READ,
    "choosable_server_tools": READ,
    "clean_sub_agent": VALIDATES,
    "connection_validate": VALIDATES,
    "tool_server_validate": VALIDATES,
    "tool_server_listing_seen": WORKER,
    "draft_validate": VALIDATES,
    "connection_test": OUTBOUND,
    "models_discover": OUTBOUND,
    "latest_version": READ,
    "may_delete": READ,
    "deleted_sessions": READ,
    "tool_server_get": READ,
    "tool_server_secrets": READ,
    "tool_servers_for_user": READ,
    "undecided": READ,
    "view_derivations": READ,
    "view_content": READ,
    "view_refusal_reason": READ,
    "session_refs": READ,
    "describe_session_history": READ,
    "replay_run": "replays a run for an operator in memory, writes nothing",
    "run_execute": WORKER,
    "connection_learn": WORKER,
    "run_claim": WORKER,
    "adopt_legacy_runs": "an operator's one-off migration command, not a user's request",
    "migrate_checkpoint": "an operator's one-off migration command, not a user's request",
    "references_migrate_batch": "an operator's one-off migration command, not a user's request",
    "snapshots_store_batch": "an operator's one-off migration command, not a user's request",
    "stored_messages_batch": "an operator's one-off migration command, not a user's request",
    "retention_apply": WORKER,
    "retention_purge": WORKER,
    "session_purge_retained": WORKER,
    "index_journal": "an operator's command after an upgrade or a rotation, not a user's request",
    "retention_due": READ,
    "oauth_token_renew": WORKER,
    "oauth_revoke_later": "queues revocations in the transaction of the action deleting rows",
    "client_metadata_document": READ,
    "member_connections_removed": "part of removing a member, in that deletion's transaction",
    "retention_days_validate": VALIDATES,
}

NESTED = "_nested"


def _modules(names: tuple[str, ...]) -> list[ModuleType]:
    """Return the named modules, each package with all of its modules."""
    found = []
    for name in names:
        module = importlib.import_module(name)
        found.append(module)
        if hasattr(module, "__path__"):
            for info in pkgutil.walk_packages(module.__path__, f"{name}."):
                found.append(importlib.import_module(info.name))
    return found


def _public_functions(modules: list[ModuleType]) -> dict[str, object]:
    """Return the public functions defined in `modules`, by name."""
    return {
        name: value
        for module in modules
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }


SERVICES = _public_functions(_modules(SERVICE_MODULES))
KNOWN = {**_public_functions(_modules(SELECTOR_MODULES)), **SERVICES}


def _callers() -> list[ModuleType]:
    """Return the API, console, admin and management command modules of the apps."""
    callers = []
    for app in APPS:
        package = importlib.import_module(app)
        for info in pkgutil.walk_packages(package.__path__, f"{app}."):
            parts = info.name.split(".")
            if "migrations" in parts or not any(CALLER.search(part) for part in parts):
                continue
            callers.append(importlib.import_module(info.name))
    return callers


def _entity(action: str) -> str:
    return action.rsplit("_", 1)[0]


@pytest.fixture
def world(db, monkeypatch):
    """A published demo agent with a session and a run, a tool server, a token and people."""
    alice = make_user("alice")
    space = ensure_demo(owner=alice)
    agent = space.agents.get()
    session = make_session(agent.versions.get(), alice)
    listing = SimpleNamespace(protocol_version="2025-06-18", tools=())
    monkeypatch.setattr(
        "models_app.services.tool_servers.list_tools", lambda *args, **kwargs: listing
    )
    return SimpleNamespace(
        alice=alice,
        bob=make_user("bob"),
        root=make_user("root", superuser=True),
        space=space,
        connection=ModelConnection.objects.get(space=space),
        server=ToolServer.objects.create(
            space=space, name="tools", url="https://tools.example.com/mcp"
        ),
        token=ApiToken.objects.create(user=alice, digest="0" * 64, prefix="00000000"),
        agent=agent,
        version=agent.versions.get(),
        session=session,
        run=make_run(session),
    )


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_an_action_refuses_to_run_inside_another_transaction(world, name):
    with pytest.raises(RuntimeError, match="durable atomic block"), transaction.atomic():
        ACTIONS[name](KNOWN[name], world)


def test_the_lists_name_functions_that_exist():
    missing = sorted(name for name in {*ACTIONS, *NOT_ACTIONS} if name not in KNOWN)
    assert missing == [], "listed here but defined in no services or selectors module"
    assert not set(ACTIONS) & set(NOT_ACTIONS)


def test_every_service_function_the_callers_use_is_classified():
    used = {
        name
        for module in _callers()
        for name, value in vars(module).items()
        if inspect.isfunction(value) and SERVICES.get(name) is value
    }
    unlisted = sorted(
        name
        for name in used
        if name not in ACTIONS
        and name not in NOT_ACTIONS
        and name.removesuffix(NESTED) not in ACTIONS
    )
    assert unlisted == [], "a new user action belongs in ACTIONS (durable), else in NOT_ACTIONS"


def test_every_service_function_named_after_an_entity_is_classified():
    entities = {_entity(name) for name in ACTIONS}
    named = {name for name in SERVICES if any(name.startswith(f"{e}_") for e in entities)}
    unlisted = sorted(
        name
        for name in named
        if name not in ACTIONS
        and name not in NOT_ACTIONS
        and name.removesuffix(NESTED) not in ACTIONS
    )
    assert unlisted == [], "a new user action belongs in ACTIONS (durable), else in NOT_ACTIONS"


def test_the_selectors_contract_forbids_the_services_this_guard_checks():
    config = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == "selectors import no services"]
    assert sorted(contract["forbidden_modules"]) == sorted(SERVICE_MODULES)
    assert sorted(contract["source_modules"]) == sorted(SELECTOR_MODULES)
    assert all(name.endswith(".services") for name in SERVICE_MODULES)


def test_a_nested_form_belongs_to_an_action():
    nested = [name for name in SERVICES if name.endswith(NESTED)]
    assert nested
    assert [name for name in nested if name.removesuffix(NESTED) not in ACTIONS] == []
