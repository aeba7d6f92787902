"""The admin pages of the models app, one module per page; each registers its own admin.

Django's admin discovery imports this package, which imports the pages:

- `connections`: the model page (a provider's models fetched on the page, where the window
  numbers came from), writing through `models_app.services.connections`;
- `tool_servers`: the tool-server page (register an MCP server, list its tools, headers
  write-only), writing through `models_app.services.tool_servers`;
- `spend_limits`: a space's monthly spend limits (the space's, an agent's, a member's).
"""

from models_app.admin import connections, spend_limits, tool_servers

__all__ = ["connections", "spend_limits", "tool_servers"]
