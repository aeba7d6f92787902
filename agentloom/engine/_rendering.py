"""Rendering versions: how records become view messages, named so old checkpoints keep theirs.

A `format: 2` checkpoint stores its view by reference and rebuilds it from the journal, so the
rules that turn records into view messages (history, run notes, call ids, reasoning) are part of
what it means. Changing one would change the view an existing run rebuilds, and break its resume
and `replay --run`. So each set of rules is a numbered version: a checkpoint's
`binding["rendering"]` names the one it was made with (a binding without it is version 1, every
checkpoint saved before versions existed); a resumed run, its rebuilt views and its replay follow
that version, and new runs use `CURRENT_RENDERING`.

| version | what it renders differently from the one before |
|---|---|
| 1 | (the rules before versions existed) assistant records keep only protocol fields |
| 2 | assistant records keep the provider's reasoning text (`reasoning_content`); run notes are |
|   | system messages shown before the message that follows them (`_protocol.place_run_note`) |
| 3 | history keeps the call ids a run gave (`r<run>-<step>-<n>`, unique in the session) instead |
|   | of rewriting them to `h<seq>_<n>`, so a new run's first request extends the last request |
|   | of the run before it (what calibration needs to carry over); other ids are still rewritten. |
|   | A run's stop note and its state are one short note, and run states in a row collapse into |
|   | one note naming each run and its reason (`_protocol.run_states_text`); the records stay |
|   | in the journal, the stop notes named by reference |
| 4 | a version with a large-record policy offers `read_record` from its first request, so the |
|   | tools never change within a session and the request after a masking can read its stubs |
|   | back; a new run starts with the plan its history last set (`_projection.inherited_plan`); |
|   | a `[feedback] …` message of a run from before the journal, adopted as a supplement, is |
|   | shown as the feedback (or run note) it was (`_projection.is_adopted_feedback`) |
| 5 | history names a run's large records by the reference the run gave them (`r<run>:<seq>`, |
|   | `_large.run_ref`) instead of `s:<seq>`, so the excerpt a run sent is sent again as it was; |
|   | a run's state is a note of its own, never merged into the note before it (notes are |
|   | append-only): a new run's first request extends the last request of the run before it |
| 6 | an imported session's history is followed by one note saying it was imported and from |
|   | where (`_projection.ImportedHistory`), placed once, before the first record that was not |
|   | imported (or at the end of history while every record is), so the model never takes it |
|   | for its own earlier work here and the note never moves within the session |
| 7 | a tool result a run masked (its compaction's stub) is shown as that stub in the history of |
|   | the runs after it, with the reference the masking run gave it, where a new run projects |
|   | the journal (no view, or a view older than the masking): a masked result is never shown |
|   | whole again by a new run's projection, in the view it starts from or after it |

To add a version: give `Rendering` a field for the new rule (its default is the old behaviour),
append an entry to `RENDERINGS` that sets it, and read the field where the rule is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentloom.engine._errors import ConfigurationError

__all__ = [
    "CURRENT_RENDERING",
    "RENDERINGS",
    "Rendering",
    "rendering_binding",
    "rendering_named",
    "rendering_of",
]


@dataclass(frozen=True)
class Rendering:
    """The rendering rules of one version; every field defaults to version 1's rule."""

    version: int
    changes: str
    # Keep the provider's reasoning text in the assistant record (and so in every view).
    keeps_reasoning: bool = False
    # The role of a run-status note, and whether a note waits for the next message before it is
    # shown (so a request never ends with one).
    note_role: str = "assistant"
    notes_wait: bool = False
    # Keep the session-unique call ids a run gave its calls in history (else `h<seq>_<n>`).
    keeps_call_ids: bool = False
    # Show a run's stop note and state as one short note, run states in a row as one note.
    collapses_notes: bool = False
    # Offer `read_record` from the first request (a large-record policy), not only while the
    # view holds a reference.
    offers_reader_first: bool = False
    # Start a new run with the plan its inherited history last set, not with none.
    inherits_plan: bool = False
    # Show a legacy `[feedback]` message adopted as a supplement as feedback, not as the user's.
    reads_adopted_feedback: bool = False
    # Name a run's record in history by the run's own reference (`r<run>:<seq>`), not `s:<seq>`.
    keeps_run_refs: bool = False
    # Show each run state as a note of its own, never changing a note already shown.
    appends_notes: bool = False
    # Follow an imported session's imported records with one note naming where they came from.
    marks_imports: bool = False
    # Show a tool result a run's compaction masked as the stub that run sent, not whole.
    keeps_masks: bool = False


def _then(previous: Rendering, version: int, changes: str, **rules: Any) -> Rendering:
    """Return the version after `previous`: its rules, with `rules` changed."""
    return replace(previous, version=version, changes=changes, **rules)


_R1 = Rendering(1, "assistant records keep only protocol fields")
_R2 = _then(
    _R1,
    2,
    "assistant records keep reasoning_content; run notes are system messages shown before the "
    "message that follows them",
    keeps_reasoning=True,
    note_role="system",
    notes_wait=True,
)
_R3 = _then(
    _R2,
    3,
    "as 2, and history keeps the session-unique call ids runs gave their calls; run states in "
    "a row are one short note",
    keeps_call_ids=True,
    collapses_notes=True,
)
_R4 = _then(
    _R3,
    4,
    "as 3, and read_record is offered from the first request; a new run inherits the plan; "
    "adopted legacy feedback is shown as feedback",
    offers_reader_first=True,
    inherits_plan=True,
    reads_adopted_feedback=True,
)
_R5 = _then(
    _R4,
    5,
    "as 4, and history names records by the references their runs gave them; each run state "
    "is a note of its own",
    keeps_run_refs=True,
    appends_notes=True,
)
_R6 = _then(
    _R5,
    6,
    "as 5, and an imported session's imported history is followed by one note saying so",
    marks_imports=True,
)
_R7 = _then(
    _R6,
    7,
    "as 6, and a tool result a run masked is shown as that run's stub in the history after it",
    keeps_masks=True,
)
RENDERINGS: tuple[Rendering, ...] = (_R1, _R2, _R3, _R4, _R5, _R6, _R7)
CURRENT_RENDERING = RENDERINGS[-1].version
_BY_VERSION = {rendering.version: rendering for rendering in RENDERINGS}


def rendering_named(version: int | None) -> Rendering:
    """Return the rules of rendering `version` (None: the current version)."""
    if version is None:
        version = CURRENT_RENDERING
    if isinstance(version, bool) or version not in _BY_VERSION:
        raise ConfigurationError("rendering", f"unknown rendering version {version!r}")
    return _BY_VERSION[version]


def rendering_of(binding: Mapping[str, Any] | None) -> Rendering:
    """Return the rendering a checkpoint's binding names (version 1 when it names none)."""
    return rendering_named((binding or {}).get("rendering", 1))


def rendering_binding(rendering: Rendering) -> dict[str, int]:
    """Return what a binding records of `rendering` (nothing for version 1, as before)."""
    return {} if rendering.version == 1 else {"rendering": rendering.version}
