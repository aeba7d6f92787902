"""Writes of the sessions app, and the worker's steps: each module holds one concern.

A user's action (`session_create`, `run_ask`, `run_decide`, …) is durable: one outermost
transaction, committed when it returns, and an error inside another atomic block; an
`<action>_nested` form is the same write as part of the caller's transaction (the admin's pages).
A transaction that locks a session's row and one of its runs' rows locks the session first.
Reads live in `sessions_app.selectors`.

- `runs`: the run lifecycle: sessions, asking, resuming, cancelling, supplements, leases and the
  one-active-run rule;
- `approvals`: approval of tool calls: only the session's creator decides, each call once; the
  run then continues; a wait no one decides ends `cancelled`;
- `questions`: a tool server's questions: the session's creator answers, declines or cancels
  each once; a waiting run then sends the same call again, an open call gets the answers;
- `deletion`: a session's soft delete and the superuser's purge;
- `reusable_views`: the observed-prefix rule (which compaction snapshot a run may save as a
  reusable view), saving views and revoking them with what derives from them;
- `journal`: an engine checkpoint turned into ordered, encrypted, idempotent journal rows, and
  the lock order (session, then run);
- `usage`: the spend record: calls and run outcomes summed by day (the space's), agent, member,
  model and currency in the transaction that records them, kept when sessions are purged;
- `execution`: one run on a worker: its lease, the engine, every step journaled;
- `rows`: a save's rows inserted as `bulk_create` would, without compiling a query each time;
- `renewer`: the process's lease renewer: the heartbeat and the cancel relay of all its runs;
- `slots`: how many of a worker process's runs use the database at once;
- `live`: a running model call's redacted output, from the worker to the run's events stream;
- `projection_points`: a new run's history loaded, and the point it reached saved for the next;
- `snapshots`: a checkpoint's compaction snapshots stored once, apart, the checkpoint pointing
  to them;
- `stored_messages`: a large inline message (a summary) stored once per session, snapshots and
  views naming it by a marker;
- `checkpoints`: a `format: 1` checkpoint rewritten by reference;
- `legacy`: runs from before the journal existed adopted, marked `raw_complete: false`;
- `replay`: a run re-driven from its own recordings and compared with its journal;
- `transfer`: the session transfer format (JSON Lines) and its signature, a key of the deployment;
- `export`: a session's export, its creator's (or an operator's, audited), streamed in batches;
- `fork`: a new session whose journal starts with a copy of another's main records up to a seq;
- `imports`: a signed export checked whole, staged hidden in batches, published in one step;
- `retention`: a space's retention rule, applied by the beat through the soft delete;
- `search_index`: the journal's keyed search index, written with each record and rebuilt after a
  key rotation.
"""
