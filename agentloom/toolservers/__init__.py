"""Tool servers: MCP servers over Streamable HTTP as sources of an agent's tools.

Plain Python, no Django (an import contract holds it, and keeps `mcp` out of the engine): the
apps give it a server's address and get tools and results back.

Where each rule lives:

- `_transport`: the HTTP client — no environment proxies, only addresses the providers' address
  guard checked (loopback and private ranges only when the deployment allows them), every 3xx
  refused, each response capped.
- `_client`: one MCP session per operation with the official SDK (the 2026-07-28 revision, or
  the `initialize` handshake of the 2025 revisions); the retry rule for an unreachable server;
  the schema-drift check before every call.
- `_questions`: a server's questions to the person as forms (a flat object of strings, numbers,
  booleans and enums, or a URL shown whole), and the check of an answer.
- `_results`: the text the model reads of a result (non-text blocks as one-line placeholders).
- `_tool`: the engine `Tool` of one server tool, `<server>__<tool>`.
- `_resources`: the built-in `read_resource` tool: which URIs a run may read (those a result of
  the same server named, or the server lists), nothing sent for any other.
- `_oauth`: OAuth 2.1 for servers that answer 401, in steps a console can take across requests:
  discovery (protected-resource then authorization-server metadata), dynamic registration,
  the PKCE (S256) authorization URL with `state` and the RFC 8707 `resource`, the code
  exchange, refresh and revocation; every OAuth URL through the address guard. The client
  sends a `Bearer` token and, on a 401, asks it once for a renewed one.
"""

from agentloom.toolservers._client import (
    ANSWER_MARGIN_SECONDS,
    DEFAULT_RETRY,
    Bearer,
    CallOutcome,
    ListedResource,
    ListedTool,
    ResourceOutcome,
    RetryRule,
    ServerAddress,
    ToolListing,
    call_tool,
    list_tools,
    read_resource,
)
from agentloom.toolservers._errors import ToolServerError
from agentloom.toolservers._oauth import (
    AuthorizationServer,
    OAuthClient,
    Pkce,
    Tokens,
    authorization_url,
    checked_oauth_url,
    client_metadata,
    discover,
    exchange_code,
    new_state,
    refresh,
    register,
    revoke,
)
from agentloom.toolservers._questions import (
    MAX_ANSWER_CHARS,
    AnswerError,
    checked_content,
    form_fields,
    question_of,
)
from agentloom.toolservers._resources import (
    MAX_URI_CHARS,
    READ_RESOURCE,
    ReadResourceTool,
    ResourceSource,
)
from agentloom.toolservers._results import (
    block_placeholder,
    named_uris,
    resource_text,
    result_text,
)
from agentloom.toolservers._tool import (
    DEFAULT_CALL_SECONDS,
    SEPARATOR,
    ServerTool,
    failure_reason,
    model_tool_name,
)
from agentloom.toolservers._transport import DEFAULT_MAX_RESPONSE_BYTES, GuardedAsyncTransport

__all__ = [
    "ANSWER_MARGIN_SECONDS",
    "DEFAULT_CALL_SECONDS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_RETRY",
    "MAX_ANSWER_CHARS",
    "MAX_URI_CHARS",
    "READ_RESOURCE",
    "SEPARATOR",
    "AnswerError",
    "AuthorizationServer",
    "Bearer",
    "CallOutcome",
    "GuardedAsyncTransport",
    "ListedResource",
    "ListedTool",
    "OAuthClient",
    "Pkce",
    "ReadResourceTool",
    "ResourceOutcome",
    "ResourceSource",
    "RetryRule",
    "ServerAddress",
    "ServerTool",
    "Tokens",
    "ToolListing",
    "ToolServerError",
    "authorization_url",
    "block_placeholder",
    "call_tool",
    "checked_content",
    "checked_oauth_url",
    "client_metadata",
    "discover",
    "exchange_code",
    "failure_reason",
    "form_fields",
    "list_tools",
    "model_tool_name",
    "named_uris",
    "new_state",
    "question_of",
    "read_resource",
    "refresh",
    "register",
    "resource_text",
    "result_text",
    "revoke",
]
