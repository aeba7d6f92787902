"""Compaction versions: how a run compacts, named so a replay re-runs the compaction it ran.

The procedure that turns a context near its budget into a smaller one (which results are masked
and when, what the summary request holds, how a summary is checked before it is accepted) decides
what a run sent and saved. Changing it would change what `replay --run` of an old run makes. So
each procedure is a numbered version, beside the rendering versions (`_rendering`): a checkpoint's
`binding["compaction"]` names the one it was made with (a binding without it is version 1, every
checkpoint saved before versions existed); a resumed run and its replay follow that version, and
new runs use `CURRENT_COMPACTION`. Like the rendering, it is part of the binding that reusable
views and projection points are keyed by.

| version | what it does differently from the one before |
|---|---|
| 1 | (the procedure before versions existed) the summary request has its own system prompt and |
|   | the material re-serialised as one user message, no tools; masking whenever a trigger fires |
| 2 | the summary prompt asks for fixed sections; before a summary is accepted, the identifiers of |
|   | the records it replaces that it lost are appended verbatim with their references, within its |
|   | room ("kept verbatim"), and the compactor cites the records it summarised (saying they can |
|   | be read back where the version offers `read_record`) |
| 3 | the summary request is the conversation as last sent (same messages, same tools, with |
|   | `tool_choice: "none"`) followed by the instruction, so a provider serves its prefix from |
|   | the prompt cache; the segmented request of version 2 only where that does not fit or fails |
| 4 | identifiers under rules 2 (`_identifiers`): an id with a code inside is kept whole        |
|   | (`KL-1220-6d81`), patterns start only where a run starts (linear on long records), and   |
|   | `search_history` and the record kinds its results name are the engine's own words        |
| 5 | masking in batches: the oldest results are masked first, until the view is at the target |
|   | and at least the policy's batch is freed (`mask_batch_ratio`), reaching into the kept    |
|   | units (never the newest) for the batch; below the batch nothing is masked and a summary  |
|   | does the compaction. A compaction that only masked is saved as a reusable view where the |
|   | view rule allows, so the runs after start from its stubs instead of unmasking them;      |
|   | every size of the attempt is the hard check's bound (`_budget.BoundMeasure`), so a view   |
|   | accepted below the trigger is one the check sends (a server tokenizer's estimate without  |
|   | the template's margins had left a masked view one token over the input budget)           |
| 6 | the newest unit's results (what the model has not read yet) are never masked, also when   |
|   | no unit is kept (a pinned head and task that leave no room for one): version 5 masked     |
|   | them then, and the model had to read them back, the same bytes again, to answer          |
| 7 | the summary, its kept-verbatim section included, takes the room left under the target,   |
|   | not under the trigger (but no less than its reserve, a fifth of the target, where a large |
|   | pinned head leaves less): a summary that filled the trigger's room brought the view back  |
|   | just below the trigger, and a growing session compacted again every few turns             |

To add a version: give `Compaction` a field for the new rule (its default is the old behaviour),
append an entry to `COMPACTIONS` that sets it, and read the field where the rule is applied
(`JournalContextManager.compaction`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agentloom.engine._errors import ConfigurationError

__all__ = [
    "COMPACTIONS",
    "CURRENT_COMPACTION",
    "Compaction",
    "compaction_binding",
    "compaction_named",
    "compaction_of",
]


@dataclass(frozen=True)
class Compaction:
    """The compaction procedure of one version; every field defaults to version 1's rule."""

    version: int
    changes: str
    # The summary keeps the identifiers of what it replaces and cites its sources (`_identifiers`).
    kept_verbatim: bool = False
    # The summary request is the conversation itself with the instruction last (`_compaction`).
    prefix_summary: bool = False
    # The rules `_identifiers` finds identifiers by (what the kept-verbatim section keeps).
    identifier_rules: int = 1
    # Masking frees at least the policy's batch, oldest results first (`_compaction`).
    batches_masks: bool = False
    # A compaction that only masked is saved as a reusable view (`services.reusable_views`).
    keeps_masks: bool = False
    # Every size of an attempt is the hard check's bound (`_budget.BoundMeasure`), not the
    # estimate.
    measures_bound: bool = False
    # Masking never reaches the newest unit, even when no unit is kept (`_compaction`).
    spares_newest: bool = False
    # The summary is asked for the room under the target, not the trigger (`_compaction`).
    summarises_to_target: bool = False


def _then(previous: Compaction, version: int, changes: str, **rules: Any) -> Compaction:
    """Return the version after `previous`: its procedure, with `rules` changed."""
    return replace(previous, version=version, changes=changes, **rules)


_C1 = Compaction(
    1,
    "the summary request has its own system prompt and the material as one user message, no "
    "tools; masking whenever a trigger fires",
)
_C2 = _then(
    _C1,
    2,
    "a sectioned summary prompt; lost identifiers appended verbatim with their references; the "
    "summarised records cited",
    kept_verbatim=True,
)
_C3 = _then(
    _C2,
    3,
    "the summary request is the conversation as sent with the instruction last, its prefix "
    "cached; the segmented request where it does not fit",
    prefix_summary=True,
)
_C4 = _then(
    _C3,
    4,
    "identifiers found under rules 2: ids with a code inside kept whole, linear on long "
    "records, the search tool's own words left out",
    identifier_rules=2,
)
_C5 = _then(
    _C4,
    5,
    "masking in batches, oldest results first, never below the policy's batch; a masking is "
    "saved as a reusable view, so the runs after keep its stubs; sizes are the hard check's "
    "bound",
    batches_masks=True,
    keeps_masks=True,
    measures_bound=True,
)
_C6 = _then(
    _C5,
    6,
    "the newest unit's results, which the model has not read, are never masked, also when no "
    "unit is kept",
    spares_newest=True,
)
_C7 = _then(
    _C6,
    7,
    "the summary takes the room left under the target, not the trigger, so the view comes back "
    "at the target and the next compaction is the policy's gap away",
    summarises_to_target=True,
)
COMPACTIONS: tuple[Compaction, ...] = (_C1, _C2, _C3, _C4, _C5, _C6, _C7)
CURRENT_COMPACTION = COMPACTIONS[-1].version
_BY_VERSION = {compaction.version: compaction for compaction in COMPACTIONS}


def compaction_named(version: int | None) -> Compaction:
    """Return the procedure of compaction `version` (None: the current version)."""
    if version is None:
        version = CURRENT_COMPACTION
    if isinstance(version, bool) or version not in _BY_VERSION:
        raise ConfigurationError("compaction", f"unknown compaction version {version!r}")
    return _BY_VERSION[version]


def compaction_of(binding: Mapping[str, Any] | None) -> Compaction:
    """Return the procedure a checkpoint's binding names (version 1 when it names none)."""
    return compaction_named((binding or {}).get("compaction", 1))


def compaction_binding(compaction: Compaction) -> dict[str, int]:
    """Return what a binding records of `compaction` (nothing for version 1, as before)."""
    return {} if compaction.version == 1 else {"compaction": compaction.version}
