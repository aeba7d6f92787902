"""Writes of the models app, and the rules every way of writing (API, admin) goes through.

Each write is a durable action: one outermost transaction, committed when it returns, and an
error inside another atomic block; an `<action>_nested` form is the same write as part of the
caller's transaction (the admin's pages). A `<noun>_validate` applies a write's rules without
writing, so the admin's forms show the API's messages. Reads live in `models_app.selectors`.

- `connections`: model connections: the rules of each field (provider, base URL and its address
  guard, key, model, window and its source, output limit and the thinking floor, prices,
  estimator), `connection_validate` and the writes;
- `redaction`: what a connection's runs redact (`redaction_secrets`): its key, its replaced keys
  (the last 5, each for 90 days, kept for redaction only) and its space's tool-server headers;
- `tool_servers`: tool servers: registration, headers write-only and redacted, a URL change
  dropping the stored headers, listing a server's tools, and `server_address` for a run's calls;
- `tool_server_oauth`: OAuth tool servers: whose account their tools act as (each member's, or
  the space's shared one), connecting (`oauth_connect_start` / `oauth_connect_finish`, the
  client chosen in the specification's order of preference, `state` bound to the browser
  session), the token a run sends and its renewal under the connection's row lock, and
  revocation when a connection, its server or its member goes;
- `discovery`: the model page's calls to a provider, saving nothing: its models
  (`models_discover`) and a test chat (`connection_test`); a stored key is used only for the
  provider and base URL it was saved for.
"""
