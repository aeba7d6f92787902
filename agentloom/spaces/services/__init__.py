"""Writes on spaces, their members and API tokens; each is durable, one outermost transaction.

Reads (who may see and do what inside a space, the tokens that authenticate now) live in
`agentloom.spaces.selectors`.

- `spaces`: creating a space (its creator becomes its admin) and adding members;
- `retention`: a space's retention rule, set by a space admin with who and when (the sessions
  app applies it);
- `tokens`: API tokens, created with a key shown once, stored as a digest, expired or revoked.
"""
