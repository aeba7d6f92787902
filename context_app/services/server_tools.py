"""Tools of tool servers in agents: choosing them, freezing them at publish, running them.

An agent lists a server's tool by its model-facing name `<server>__<tool>` beside the built-in
names. The draft accepts a name the space's server listed (as last refreshed). Publishing freezes,
per chosen tool, its server (id and name), its name on the server, its description and its input
schema into the version snapshot (`server_tools`); a later change on the server never changes a
published version. At call time the server must still list the same schema, else the call is a
tool error naming the tool (`agentloom.toolservers`), and the operator publishes again.

Only the main instance uses server tools; sub-agents take built-in tools. Runs read a server's URL
and headers live (a rotated credential works for old versions), and its OAuth token: the session
creator's own, or the space's shared one (`models_app.services.tool_server_oauth`); a deleted
server makes its tools' calls fail as tool errors. That read is the run's database work like any
other: the worker wraps it (`held`) so that it takes one of its database slots and gives the
connection back before the call, which may last `TOOL_CALL_SECONDS` and holds no connection.

Resources: publishing also freezes which of those servers declare resources
(`resource_servers`); a version with any gets the built-in `read_resource`
(`agentloom.toolservers._resources` holds the rule). The URIs it may read of a server are those
its results named in the session (the run says how to find them: `NamedUris`) and those the
server listed at its last refresh. What a call saw of a server's tools goes to
`tool_server_listing_seen`, which marks a changed listing stale in the console.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from agentloom.errors import InvalidInput
from agentloom.toolservers import (
    SEPARATOR,
    ListedTool,
    ReadResourceTool,
    ResourceSource,
    ServerAddress,
    ServerTool,
    ToolServerError,
)
from models_app.models import ToolServer
from models_app.selectors import tool_servers_of_space
from models_app.services.tool_server_oauth import server_address_for_run
from models_app.services.tool_servers import tool_server_listing_seen

# What the worker wraps a run's database work in (`database_slots.wrap`).
Held = Callable[[Callable[..., Any]], Callable[..., Any]]
# The URIs the results of the given tools (a server's model-facing names) named in the session.
NamedUris = Callable[[frozenset[str]], set[str]]

__all__ = [
    "Held",
    "choosable_server_tools",
    "clean_approval",
    "clean_server_tool_names",
    "frozen_resource_servers",
    "frozen_server_tools",
    "read_resource_tool",
    "server_tools_of",
]


def choosable_server_tools(space_id: int) -> dict[str, dict[str, Any]]:
    """Return the server tools the space's agents may list, by model-facing name."""
    choices: dict[str, dict[str, Any]] = {}
    for server in tool_servers_of_space(space_id):
        for entry in server.tools or []:
            if "unavailable" in entry:
                continue
            choices[entry["model_name"]] = {
                "default_approval": server.approval,
                "server_id": server.pk,
                "server": server.name,
                "tool": entry["name"],
                "description": entry.get("description", ""),
                "input_schema": entry.get("input_schema") or {},
            }
    return choices


def clean_server_tool_names(names: list[str], *, space_id: int | None, field: str) -> None:
    """Refuse any name with `__` that is not a listed tool of the space's servers."""
    wanted = [name for name in names if SEPARATOR in name]
    if not wanted:
        return
    if field != "tools":
        raise InvalidInput(
            f"Tool server tools are for the agent itself, not sub-agents: {', '.join(wanted)}.",
            field=field,
        )
    available = choosable_server_tools(space_id) if space_id is not None else {}
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise InvalidInput(
            f"Not a listed tool of this space's tool servers: {', '.join(unknown)}. List a "
            "server's tools (refresh) before choosing them.",
            field=field,
        )


def clean_approval(value: Any, *, tools: list[str]) -> dict[str, str]:
    """Return the per-tool approval modes, each naming one of the agent's server tools."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("Must be an object of tool names and modes.", field="approval")
    for name, mode in value.items():
        if name not in tools or SEPARATOR not in name:
            raise InvalidInput(
                f"{name!r} is not a tool-server tool of this agent.", field="approval"
            )
        if mode not in ("always", "never"):
            raise InvalidInput(f"The mode of {name} must be always or never.", field="approval")
    return dict(value)


def frozen_server_tools(
    space_id: int, names: list[str], approval: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Return the snapshot entries of the server tools among `names`, as listed now; each says
    whether a person approves its calls (the agent's mode for it, else its server's default)."""
    available = choosable_server_tools(space_id)
    wanted = [name for name in names if SEPARATOR in name]
    missing = [name for name in wanted if name not in available]
    if missing:
        raise InvalidInput(
            f"The tool servers no longer list {', '.join(missing)}; refresh the server or "
            "remove the tools.",
            field="tools",
        )
    approval = approval or {}
    frozen = []
    for name in wanted:
        entry = dict(available[name])
        default = entry.pop("default_approval")
        frozen.append({"name": name, **entry, "approval": approval.get(name, default) == "always"})
    return frozen


def frozen_resource_servers(server_tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the snapshot entries of the servers among `server_tools` that declare resources
    (as last listed): `{server_id, server}` each, in the order of the tools."""
    ids = list(dict.fromkeys(entry["server_id"] for entry in server_tools))
    declaring = set(
        ToolServer.objects.filter(pk__in=ids, declares_resources=True).values_list("pk", flat=True)
    )
    names = {entry["server_id"]: entry["server"] for entry in server_tools}
    return [{"server_id": pk, "server": names[pk]} for pk in ids if pk in declaring]


def _address_of(
    server_id: int, held: Held | None, member_id: int | None = None
) -> Callable[[], ServerAddress]:
    def address() -> ServerAddress:
        server = ToolServer.objects.filter(pk=server_id).first()
        if server is None:
            raise ToolServerError("unknown_tool", "The tool server of this tool was deleted.")
        return server_address_for_run(server, member_id=member_id)

    return held(address) if held is not None else address


def _listing_seen(server_id: int, held: Held | None):
    def seen(listed: tuple[ListedTool, ...], notified: bool) -> None:
        tool_server_listing_seen(server_id=server_id, listed=listed, notified=notified)

    return held(seen) if held is not None else seen


def server_tools_of(
    snapshot: dict[str, Any], *, held: Held | None = None, member_id: int | None = None
) -> list[ServerTool]:
    """Return the engine tools of a version's frozen server tools; `held` wraps each read of a
    server's address and each report of its listing (a run's database slot). `member_id` is
    whose OAuth connection a server whose members connect their own accounts is called with."""
    return [
        ServerTool(
            name=entry["name"],
            tool=entry["tool"],
            description=entry["description"],
            input_schema=entry["input_schema"],
            address=_address_of(entry["server_id"], held, member_id),
            server=entry.get("server", ""),
            call_seconds=settings.TOOL_CALL_SECONDS,
            needs_approval=bool(entry.get("approval")),
            on_listing=_listing_seen(entry["server_id"], held),
        )
        for entry in snapshot.get("server_tools") or []
    ]


def _offered_uris(
    server_id: int, tool_names: frozenset[str], named: NamedUris | None, held: Held | None
) -> Callable[[], set[str]]:
    def offered() -> set[str]:
        listed = ToolServer.objects.filter(pk=server_id).values_list("resources", flat=True)
        uris = {str(entry.get("uri")) for entry in (listed.first() or [])}
        return uris | (named(tool_names) if named is not None else set())

    return held(offered) if held is not None else offered


def read_resource_tool(
    snapshot: dict[str, Any],
    *,
    named: NamedUris | None = None,
    held: Held | None = None,
    member_id: int | None = None,
) -> ReadResourceTool | None:
    """Return the version's `read_resource` tool, or None when none of its servers declared
    resources at publish. `named` finds the URIs a server's results named in the run's session
    (without it, only listed URIs are offered)."""
    servers = snapshot.get("resource_servers") or []
    if not servers:
        return None
    tools = snapshot.get("server_tools") or []
    sources = []
    for entry in servers:
        server_id = entry["server_id"]
        names = frozenset(tool["name"] for tool in tools if tool["server_id"] == server_id)
        sources.append(
            ResourceSource(
                server=entry["server"],
                address=_address_of(server_id, held, member_id),
                offered=_offered_uris(server_id, names, named, held),
            )
        )
    return ReadResourceTool(sources, call_seconds=settings.TOOL_CALL_SECONDS)
