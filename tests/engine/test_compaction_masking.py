"""Masking in batches (compaction version 5): oldest results first, never below the batch.

Masking rewrites the prompt from its first new stub on, so a provider's prompt cache serves
nothing after it: a masking must free at least the policy's batch (`mask_batch_ratio` of the
effective input budget) or not happen. Older versions keep their rule: a replayed run of
version 4 masks what it masked.
"""

from __future__ import annotations

import pytest

from agentloom.engine import ContextPolicy, LargeRecords, ModelBudget
from agentloom.engine.testing import text_response
from tests.engine.helpers import add_group, new_context

# Effective budget 5,376 bytes: trigger at 4,301, target 3,226, a batch of 538.
BUDGET = ModelBudget(6_144, 512, 256)
STUB = "hidden to save room"


def _context(compaction: int, **policy):
    return new_context(
        ContextPolicy(context_ratio=0.8, target_ratio=0.6, **policy),
        BUDGET,
        large_records=LargeRecords(),
        compaction=compaction,
    )


def _summary(_request):
    return text_response("the summary NONCE-S")


def _no_call(_request):
    raise AssertionError("masking needs no model call")


def _masked(context) -> list[int]:
    """Return the view indexes of the tool results shown as stubs."""
    return [
        index
        for index, message in enumerate(context.frame.messages)
        if message.get("role") == "tool" and STUB in message["content"]
    ]


def _results(context) -> list[int]:
    return [i for i, m in enumerate(context.frame.messages) if m.get("role") == "tool"]


def _small_old_results(context) -> None:
    """Old results that free little when masked, behind notes that fill the view."""
    for n in range(4):
        add_group(context, [f"NONCE-{n} " + "r" * 150])
        context.add_feedback("note " + "w" * 1_000)


def test_masking_never_fires_for_less_than_its_batch():
    context = _context(5)
    _small_old_results(context)
    outcome = context.prepare("action", call_model=_summary).compaction
    assert outcome.succeeded and outcome.reason.startswith("compacted")
    # Masking the old results would free less than 538: no masking stage, a summary alone.
    stages = [row["stage"] for row in context.frame.state.compaction_log]
    assert stages == ["summary"]
    assert not _masked(context)


def test_under_compaction_4_the_same_view_still_masks_before_its_summary():
    context = _context(4)
    _small_old_results(context)
    outcome = context.prepare("action", call_model=_summary).compaction
    assert outcome.succeeded
    # Measured on the code before version 5: the same rows, the same sizes.
    rows = [
        (row["stage"], row["before"], row["after"], row["outcome"])
        for row in context.frame.state.compaction_log
    ]
    assert rows == [("masking", 5_807, 5_558, "applied"), ("summary", 5_558, 2_059, "succeeded")]
    # It freed less than version 5's batch (538).
    assert ContextPolicy().mask_batch_at(BUDGET) > 5_807 - 5_558


def _eight_results(compaction: int):
    context = _context(compaction)
    for n in range(8):
        add_group(context, [f"NONCE-{n} " + "r" * 700])
    outcome = context.prepare("action", call_model=_no_call).compaction
    assert (outcome.outcome, outcome.reason, outcome.calls) == ("succeeded", "masked", 0)
    return context, outcome


def test_masking_goes_oldest_first_and_stops_at_the_target():
    context = _context(5)
    for n in range(12):
        add_group(context, [f"NONCE-{n} " + "r" * 700])
        outcome = context.prepare("action", call_model=_no_call).compaction
        if outcome is not None:
            break
    assert (outcome.outcome, outcome.reason, outcome.calls) == ("succeeded", "masked", 0)
    # The trigger fired at the sixth result: the three oldest bring the view to the target.
    results, masked = _results(context), _masked(context)
    assert len(results) == 6 and masked == results[:3]
    assert outcome.after <= ContextPolicy().target_at(BUDGET) < outcome.after + 430
    assert outcome.before - outcome.after >= ContextPolicy().mask_batch_at(BUDGET)
    first = context.frame.messages[masked[0]]["content"]
    assert 'read_record(ref="r1:3")' in first


def test_a_masking_brings_the_view_to_the_target_where_4_stopped_below_the_trigger():
    context, outcome = _eight_results(5)
    results, masked = _results(context), _masked(context)
    # Seven of eight, oldest first: six would leave the view above the target (version 4
    # stops below the trigger, after five, so its next masking comes sooner).
    assert masked == results[:7] and (outcome.before, outcome.after) == (5_831, 2_807)


def test_a_replayed_compaction_4_masks_what_it_masked():
    context, outcome = _eight_results(4)
    # Version 4 masks every result the kept units leave out, however little that frees: the
    # results of the five oldest groups (measured on the code before version 5).
    assert _masked(context) == _results(context)[:5]
    assert (outcome.before, outcome.after) == (5_831, 3_671)


def test_a_batch_reaches_into_the_kept_units_but_never_the_newest():
    context = _context(5, mask_batch_ratio=0.4)
    for n in range(8):
        add_group(context, [f"NONCE-{n} " + "r" * 700])
    outcome = context.prepare("action", call_model=_no_call).compaction
    assert outcome.reason == "masked"
    assert outcome.before - outcome.after >= ContextPolicy(mask_batch_ratio=0.4).mask_batch_at(
        BUDGET
    )
    results, masked = _results(context), _masked(context)
    assert masked == results[: len(masked)] and len(masked) > 4
    assert results[-1] not in masked


def test_a_batch_the_older_results_cannot_free_masks_nothing_not_even_the_newest():
    # Masking all but the newest result would free 3,024, below a batch of 3,226; the newest
    # would make it, but the model has not read it yet: a summary compacts instead.
    context = _context(5, mask_batch_ratio=0.6)
    for n in range(8):
        add_group(context, [f"NONCE-{n} " + "r" * 700])
    outcome = context.prepare("action", call_model=_summary).compaction
    assert outcome.succeeded
    assert [row["stage"] for row in context.frame.state.compaction_log] == ["summary"]
    assert not _masked(context)


@pytest.mark.parametrize("chars", [120, 200, 400, 700, 1_500])
@pytest.mark.parametrize("ratio", [0.05, 0.1, 0.2])
def test_no_masking_frees_less_than_the_batch(chars, ratio):
    context = _context(5, mask_batch_ratio=ratio)
    batch = ContextPolicy(mask_batch_ratio=ratio).mask_batch_at(BUDGET)
    for n in range(40):
        add_group(context, [f"NONCE-{n} " + "r" * chars])
        if n % 3 == 0:
            context.add_feedback("note " + "w" * 300)
        context.prepare("action", call_model=_summary)
    rows = [row for row in context.frame.state.compaction_log if row["stage"] == "masking"]
    assert all(row["before"] - row["after"] >= batch for row in rows)


def test_a_batch_of_zero_masks_as_much_as_the_target_needs():
    context = _context(5, mask_batch_ratio=0)
    _small_old_results(context)
    context.prepare("action", call_model=_summary)
    assert context.frame.state.compaction_log[0]["stage"] == "masking"


def _large_newest_result(compaction: int):
    """A task that leaves no room for keeping a unit, then results until the trigger fires."""
    context = new_context(
        ContextPolicy(context_ratio=0.8, target_ratio=0.6),
        BUDGET,
        task="the task NONCE-TASK " + "t" * 2_400,
        large_records=LargeRecords(),
        compaction=compaction,
    )
    for n in range(8):
        add_group(context, [f"NONCE-{n} " + "r" * 400])
        outcome = context.prepare("action", call_model=_summary).compaction
        if outcome is not None:
            return context, outcome
    raise AssertionError("the trigger never fired")


def test_the_result_the_model_has_not_read_is_never_masked_even_when_no_unit_is_kept():
    # Masking the newest result would make the model read it back (one more call, the same
    # bytes again, masked again): from compaction version 6 the older ones are masked alone.
    context, outcome = _large_newest_result(6)
    results, masked = _results(context), _masked(context)
    assert outcome.succeeded and outcome.reason == "masked"
    assert masked == results[:2] and results[-1] not in masked
    assert f"NONCE-{len(results) - 1}" in context.frame.messages[results[-1]]["content"]


def test_a_replayed_compaction_5_still_masks_the_newest_result_when_no_unit_is_kept():
    context, _outcome = _large_newest_result(5)
    results = _results(context)
    assert _masked(context) == results
