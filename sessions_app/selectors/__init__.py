"""Reads of sessions, runs, the journal, views, model calls and a run's context.

A session and everything under it is readable only by its creator, and only while they are a
member of the session's space; to anyone else it does not exist (NotFound). A deleted session
(`deleted_at` set) does not exist for anyone. Nothing here writes or locks a row.

- `sessions`: the sessions a user may read, manage or delete; the instances a session holds.
- `runs`: a run its reader may see, its counters and model calls, whether it waits on a model.
- `journal`: pages of journal records, records by seq, a run's journaled terminal status.
- `views`: the reusable view a new run reuses (the rule: `services.reusable_views`), where each
  view derives from, and its content.
- `history`: the history a new run inherits, and the inherited block a checkpoint names.
- `masks`: the tool results runs masked, read from their stored snapshots, which a new run's
  projection keeps masked (rendering 7).
- `checkpoints`: the journal-backed record store and a run's checkpoint as a frame.
- `stored_messages`: the large messages snapshots and views name by a marker, read back.
- `context`: a run's view measured against its budget, its compactions, calibration starts.
- `costs`: the cost of a model call, a run and a session; a session's cached share per run.
- `compaction_costs`: what each compaction spent and saved, in money at its calls' prices
  (computed when read; the rules in its docstring).
- `approvals`: the calls a run still waits on, and the decisions taken so far.
- `questions`: a tool server's questions a run still waits on, and the answers so far.
- `usage`: the spend record over a range of a space's days, as its reader may see it (admins:
  every member's usage; members: their own).
- `resources`: the resource URIs a session's tool results named (what `read_resource` may read).
- `search`: the journal searched through its keyed index (`search_history`, the journal page).
"""
