"""Writes of the context app, and the rules every way of writing an agent (API, admin) goes through.

Each write is a durable action: one outermost transaction, committed when it returns, and an
error inside another atomic block; `agent_publish_nested` is the same write as part of the
caller's transaction (the admin's change page). Reads live in `context_app.selectors`.

- `agents`: drafts with a validated context policy, sub-agents and tools, and publishing, which
  freezes a version's snapshot (`version_snapshot`);
- `server_tools`: tool-server tools in agents: which a draft may choose, their approval modes,
  what publishing freezes of each, and the tools a run of a published version calls.
"""
