"""The mutation table of the rules: break each rule with one line and watch its tests fail.

    .venv/bin/python bench/mutants.py                  # every mutant, in sequence (minutes)
    .venv/bin/python bench/mutants.py --check          # only check that every mutant applies
    .venv/bin/python bench/mutants.py --only hard_check_payload interleaving
    .venv/bin/python bench/mutants.py --list           # the rules and mutants, nothing run

Each mutant (`MUTANTS`, below) names a rule of the engine's rule index or of the application, the
file that holds it, a source snippet that occurs exactly once in that file, the one-line change
that breaks the rule, and the example tests that should fail when it is broken. The script copies
the working tree to a scratch directory, runs the union of the listed tests once on the unchanged
copy (they must all pass there), then applies one mutant at a time, runs its tests on SQLite and
restores the file. It prints rule → mutant → killed by → yes/no, and the totals; it exits non-zero
when a mutant survives, when a snippet does not occur exactly once (the source moved: re-point the
mutant) or when a listed test does not pass on the unchanged copy.

A rule that is PostgreSQL's own (a query plan) has a mutant marked `postgres`: its tests run in
the PostgreSQL leg when DATABASE_URL names a PostgreSQL database, and it is listed as not run
otherwise (neither killed nor survived).

Only example tests count: a listed test that is a property test (Hypothesis's `@given`) is refused,
since a random search that happens to find the break is not a test of the rule.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Per mutant: a mutant that makes a test hang is killed by the timeout.
MUTANT_SECONDS = 300
_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "var", "artifacts", ".hypothesis", ".pytest_cache",
    ".ruff_cache", "staticfiles", "htmlcov", "node_modules",
)  # fmt: skip
# Loaded into the scratch run with `-p`: a property test among the listed ones is a usage error.
_PLUGIN = """
import pytest


def pytest_collection_modifyitems(config, items):
    properties = [
        item.nodeid
        for item in items
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
    ]
    if properties:
        raise pytest.UsageError("property tests do not count as killers: " + ", ".join(properties))
"""


@dataclass(frozen=True)
class Mutant:
    """One rule broken by one change: `before` must occur exactly once in `path`."""

    rule: str
    name: str
    path: str
    before: str
    after: str
    tests: tuple[str, ...]
    # Its tests run in the PostgreSQL leg (DATABASE_URL), where the rule is PostgreSQL's own.
    postgres: bool = False


_ENGINE = "agentloom/engine"
_PROMPT_CACHE = "tests/support/prompt_cache.py"
_VIEWS = "sessions_app/services/reusable_views.py"
_REASONING = "tests/providers/test_reasoning_passback.py::"
_MASKING = "tests/engine/test_compaction_masking.py::"
_COMPACTION = "tests/engine/test_compaction.py::"
_PREFIX = "tests/engine/test_prefix_summary.py::"
_COSTS = "sessions_app/selectors/compaction_costs.py"
_MONEY = "tests/sessions_app/test_compaction_costs.py::"
_KEYS = "tests/sessions_app/test_encryption_keys.py::"


MUTANTS: tuple[Mutant, ...] = (
    # --- triggers (_policy) --------------------------------------------------------------------
    Mutant(
        "budget trigger at the exact product",
        "trigger_strict",
        f"{_ENGINE}/_policy.py",
        "if size >= self.trigger_at(budget):",
        "if size > self.trigger_at(budget):",
        (
            "tests/engine/test_policy.py::test_budget_trigger_fires_at_eighty_percent_of_the_effective_budget",
        ),
    ),
    Mutant(
        "triggers are an OR: turns alone fire",
        "trigger_turns_needs_budget",
        f"{_ENGINE}/_policy.py",
        "if self.user_turns is not None and turns >= self.user_turns:",
        "if self.user_turns is not None and turns >= self.user_turns and triggers:",
        (
            "tests/engine/test_policy.py::test_turns_or_steps_fire_only_when_enabled_and_count_from_the_baselines",
        ),
    ),
    Mutant(
        "triggers are an OR: steps alone fire",
        "trigger_steps_needs_budget",
        f"{_ENGINE}/_policy.py",
        "if self.model_steps is not None and steps >= self.model_steps:",
        "if self.model_steps is not None and steps >= self.model_steps and triggers:",
        (
            "tests/engine/test_policy.py::test_turns_or_steps_fire_only_when_enabled_and_count_from_the_baselines",
        ),
    ),
    Mutant(
        "legacy policy counts characters, not the estimate",
        "legacy_counts_estimate",
        f"{_ENGINE}/_policy.py",
        "        return view_characters(messages)",
        "        return estimator.estimate(messages, tools)",
        ("tests/engine/test_policy.py::test_legacy_policy_measures_characters_of_the_view",),
    ),
    # --- compaction (_compaction) ----------------------------------------------------------------
    Mutant(
        "compaction keeps whole tool groups",
        "groups_split",
        f"{_ENGINE}/_compaction.py",
        """while end < len(messages) and messages[end].get("role") == "tool":""",
        """while False and end < len(messages) and messages[end].get("role") == "tool":""",
        ("tests/engine/test_compaction.py::test_tool_groups_are_kept_whole_or_summarised_whole",),
    ),
    Mutant(
        "success: the view must shrink",
        "success_without_shrink",
        f"{_ENGINE}/_compaction.py",
        "if after >= self.before:",
        "if False:",
        (
            "tests/engine/test_compaction.py::test_a_summary_longer_than_what_it_replaces_fails_as_no_reduction",
        ),
    ),
    Mutant(
        "success: target_reached reports the target",
        "target_reached_forced",
        f"{_ENGINE}/_compaction.py",
        'target_reached=kind == "succeeded" and after <= self.target_at,',
        "target_reached=True,",
        (
            "tests/engine/test_compaction.py::test_a_summary_longer_than_what_it_replaces_fails_as_no_reduction",
            "tests/engine/test_compaction.py::test_a_compaction_below_the_trigger_but_above_the_target_says_target_not_reached",
        ),
    ),
    Mutant(
        "summary calls at most max_compaction_calls",
        "summary_calls_one_more",
        f"{_ENGINE}/_compaction.py",
        "while not fragments.done and calls < max_calls:",
        "while not fragments.done and calls <= max_calls:",
        ("tests/engine/test_compaction.py::test_no_more_summary_calls_than_the_policy_allows",),
    ),
    Mutant(
        "an empty summary fails the compaction",
        "empty_summary_accepted",
        f"{_ENGINE}/_compaction.py",
        "if not reply.strip():",
        "if False:",
        (
            "tests/engine/test_compaction.py::test_a_failed_compaction_keeps_view_sources_and_baselines",
        ),
    ),
    Mutant(
        "pinned content at the trigger skips without a call",
        "pinned_too_large_tried",
        f"{_ENGINE}/_compaction.py",
        "if pinned_size >= self.trigger_at:",
        "if False:",
        (
            "tests/engine/test_throttle.py::test_pinned_content_above_the_trigger_skips_without_a_model_call",
        ),
    ),
    Mutant(
        "compaction is judged on the payload the gateway sends",
        "compaction_measures_view",
        f"{_ENGINE}/_compaction.py",
        "        if request.sent is not None:",
        "        if False:",
        (
            "tests/engine/test_compaction.py::test_a_compaction_is_judged_on_the_payload_the_gateway_sends",
        ),
    ),
    Mutant(
        "baselines advance on a successful compaction only",
        "baselines_stay",
        f"{_ENGINE}/_context.py",
        "            frame.counters.advance_baselines()",
        "            pass",
        (
            "tests/engine/test_compaction.py::test_a_triggered_compaction_replaces_old_history_with_a_validated_summary",
            "tests/engine/test_compaction.py::test_baselines_persist_and_the_next_trigger_counts_from_them",
        ),
    ),
    # --- the hard check (_engine, _budget) -------------------------------------------------------
    Mutant(
        "hard check measures the exact payload, not the view",
        "hard_check_measures_view",
        f"{_ENGINE}/_engine.py",
        "measured = self._measure(sent)",
        "measured = self._measure(request)",
        (
            "tests/engine/test_engine.py::test_a_payload_over_the_budget_is_refused_before_sending_though_its_view_fits",
        ),
    ),
    Mutant(
        "hard check refuses a request over the budget",
        "hard_check_removed",
        f"{_ENGINE}/_engine.py",
        """refusal = budget_refusal(request.purpose, measured["upper_bound"], self.budget)""",
        "refusal = None",
        (
            "tests/engine/test_engine.py::test_a_payload_over_the_budget_is_refused_before_sending_though_its_view_fits",
        ),
    ),
    Mutant(
        "hard check: a request at the budget may be sent",
        "hard_check_strict",
        f"{_ENGINE}/_budget.py",
        "if bound <= effective:",
        "if bound < effective:",
        (
            "tests/engine/test_budget.py::test_the_hard_check_sends_a_request_at_the_budget_and_refuses_one_above_it",
        ),
    ),
    Mutant(
        "model-call limit per execution",
        "model_call_limit_plus_one",
        f"{_ENGINE}/_engine.py",
        "if self.model_calls >= limit:",
        "if self.model_calls > limit:",
        (
            "tests/engine/test_engine.py::test_the_model_call_limit_fails_the_run_and_resets_on_resume",
        ),
    ),
    # --- server counts and learned limits (_server_count, _budget, _engine) --------------------
    Mutant(
        "server count: the stated template margins",
        "server_margins_dropped",
        f"{_ENGINE}/_server_count.py",
        'fixed += config["tools_preamble"] + config["per_tool"] * len(tools)',
        'fixed += config["per_tool"] * len(tools)',
        (
            "tests/engine/test_server_count.py::test_a_request_is_the_servers_count_of_each_rendered_text_plus_the_stated_margins",
        ),
    ),
    Mutant(
        "server count: one batch per request",
        "server_count_per_text",
        f"{_ENGINE}/_server_count.py",
        "counted = self._ask(texts)",
        "counted = [n for text in texts for n in self._ask([text])]",
        (
            "tests/engine/test_server_count.py::test_a_request_is_the_servers_count_of_each_rendered_text_plus_the_stated_margins",
        ),
    ),
    Mutant(
        "server count: cached per content",
        "server_count_uncached",
        f"{_ENGINE}/_server_count.py",
        "self._cache.store(items[index], size, keys[index])",
        "pass",
        (
            "tests/engine/test_server_count.py::test_counts_are_cached_per_content_and_only_new_texts_are_sent_in_one_batch",
        ),
    ),
    Mutant(
        "server count: without the tokenizer, bytes for what was not counted",
        "server_fallback_without_bytes",
        f"{_ENGINE}/_server_count.py",
        "bound += _utf8(self._text(items[index]))",
        "bound += 0",
        (
            "tests/engine/test_server_count.py::test_when_the_tokenizer_fails_the_bound_is_the_last_exact_count_plus_the_bytes_since",
            "tests/engine/test_server_count.py::test_a_run_whose_tokenizer_stops_answering_goes_on_from_its_last_exact_counts",
            "tests/engine/test_server_count.py::test_without_the_tokenizer_a_request_that_does_not_fit_in_bytes_is_not_sent_and_resumes",
        ),
    ),
    Mutant(
        "server count: a request that does not fit without the tokenizer stops resumably",
        "server_fallback_note_dropped",
        f"{_ENGINE}/_context.py",
        "return PreparedContext(None, estimate, reason + note, outcome)",
        "return PreparedContext(None, estimate, reason, outcome)",
        (
            "tests/engine/test_server_count.py::test_without_the_tokenizer_a_request_that_does_not_fit_in_bytes_is_not_sent_and_resumes",
        ),
    ),
    Mutant(
        "server count: each call records the counts its check used",
        "call_counts_unrecorded",
        f"{_ENGINE}/_engine.py",
        "counts=self._recorded_counts(measured),",
        "counts=None,",
        (
            "tests/engine/test_server_count.py::test_each_call_records_the_counts_its_hard_check_used_and_the_checkpoint_keeps_them",
        ),
    ),
    Mutant(
        "server count: the checkpoint keeps the per-content counts",
        "checkpoint_counts_dropped",
        f"{_ENGINE}/_engine.py",
        "self.main.managed.state.token_counts = server.recorded()",
        "self.main.managed.state.token_counts = None",
        (
            "tests/engine/test_server_count.py::test_each_call_records_the_counts_its_hard_check_used_and_the_checkpoint_keeps_them",
            "tests/engine/test_server_count.py::test_a_resume_without_the_tokenizer_measures_with_the_counts_its_checkpoint_kept",
        ),
    ),
    Mutant(
        "server count: a resume measures with the counts its checkpoint kept",
        "resume_counts_forgotten",
        f"{_ENGINE}/_engine.py",
        "estimator.remember(frame.state.token_counts)",
        "estimator.remember(None)",
        (
            "tests/engine/test_server_count.py::test_a_resume_without_the_tokenizer_measures_with_the_counts_its_checkpoint_kept",
        ),
    ),
    Mutant(
        "server count: messages counted as an autoescaping template renders them",
        "server_count_unescaped",
        f"{_ENGINE}/_server_count.py",
        'return autoescaped(text) if self.config["escape_html"] else text',
        "return text",
        (
            "tests/engine/test_server_count.py::test_message_texts_are_counted_as_an_autoescaping_template_renders_them",
        ),
    ),
    Mutant(
        "server count: a bound over the budget fires the budget trigger",
        "server_bound_no_trigger",
        f"{_ENGINE}/_context.py",
        "or server_estimator_of(self.estimator) is not None",
        "or False",
        (
            "tests/engine/test_server_count.py::test_a_request_whose_bound_is_over_the_budget_is_compacted_though_its_estimate_is_not",
        ),
    ),
    Mutant(
        "server count: a replay measures with the counts its run recorded",
        "replay_counts_forgotten",
        f"{_ENGINE}/_engine.py",
        "estimator.remember(token_counts)",
        "estimator.remember(None)",
        (
            "tests/engine/test_server_count.py::test_a_replay_measures_with_the_counts_its_run_recorded_without_the_server",
        ),
    ),
    Mutant(
        "calibration: a call without usage learns from the server's exact count",
        "calibration_needs_usage",
        f"{_ENGINE}/_engine.py",
        'reported = counts["estimate"]',
        "reported = None",
        (
            "tests/engine/test_server_count.py::test_a_call_without_usage_calibrates_from_the_servers_exact_count",
        ),
    ),
    Mutant(
        "learned window: the window a refusal names",
        "learned_ignores_named",
        f"{_ENGINE}/_budget.py",
        "if named is not None and named - reserve < refused:",
        "if False:",
        (
            "tests/engine/test_learned_window.py::test_the_rule_learns_the_named_window_else_the_largest_success_never_above_the_budget",
            "tests/engine/test_learned_window.py::test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once",
        ),
    ),
    Mutant(
        "learned window: without a number, the largest request that succeeded",
        "learned_ignores_largest_ok",
        f"{_ENGINE}/_budget.py",
        "elif largest_ok is not None and largest_ok < refused:",
        "elif False:",
        (
            "tests/engine/test_learned_window.py::test_the_rule_learns_the_named_window_else_the_largest_success_never_above_the_budget",
            "tests/engine/test_learned_window.py::test_a_refusal_without_a_number_learns_the_largest_request_that_succeeded",
        ),
    ),
    Mutant(
        "learned window: the largest request that succeeded is kept",
        "largest_ok_unrecorded",
        f"{_ENGINE}/_engine.py",
        'state.largest_ok = max(state.largest_ok or 0, measured["upper_bound"])',
        "state.largest_ok = None",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_without_a_number_learns_the_largest_request_that_succeeded",
        ),
    ),
    Mutant(
        "learned window: never larger than the budget in force",
        "learned_above_budget",
        f"{_ENGINE}/_budget.py",
        "return max(min(window, budget.context_window), 1)",
        "return max(window, 1)",
        (
            "tests/engine/test_learned_window.py::test_the_rule_learns_the_named_window_else_the_largest_success_never_above_the_budget",
        ),
    ),
    Mutant(
        "learned window: written into the checkpoint's binding",
        "learned_not_in_binding",
        f"{_ENGINE}/_engine.py",
        "                context.apply_budget(learned)",
        "                pass",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once",
            "tests/engine/test_learned_window.py::test_a_second_refusal_ends_the_run_and_a_resume_sees_the_learned_window",
        ),
    ),
    Mutant(
        "learned window: journaled as feedback",
        "learned_not_journaled",
        f"{_ENGINE}/_engine.py",
        "        if self.main is not None:\n            self.main.add_run_note(",
        "        if False:\n            self.main.add_run_note(",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once",
        ),
    ),
    Mutant(
        "learned limit: announced to the application",
        "learned_not_announced",
        f"{_ENGINE}/_engine.py",
        "        if on_learned is not None:\n            on_learned(limit)",
        "        if on_learned is not None:\n            pass",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once",
            "tests/engine/test_learned_window.py::test_a_refusal_the_gateway_adapts_to_is_announced_and_resent_once",
        ),
    ),
    Mutant(
        "learned window: compact against it and retry the step once",
        "learned_no_retry",
        f"{_ENGINE}/_engine.py",
        "for second in (False, True):",
        "for second in (True,):",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_naming_a_window_is_learned_compacted_against_and_the_call_retried_once",
            "tests/engine/test_learned_window.py::test_a_summary_call_refused_for_length_teaches_the_window_and_the_step_is_prepared_again",
        ),
    ),
    Mutant(
        "learned window: a second refusal of the step ends the run",
        "learned_second_retry",
        f"{_ENGINE}/_engine.py",
        "for second in (False, True):",
        "for second in (False, False, True):",
        (
            "tests/engine/test_learned_window.py::test_a_second_refusal_ends_the_run_and_a_resume_sees_the_learned_window",
        ),
    ),
    Mutant(
        "learned window: too little room for a question fails saying to republish",
        "learned_room_unchecked",
        f"{_ENGINE}/_engine.py",
        "        if room.fits:",
        "        if True:",
        (
            "tests/engine/test_learned_window.py::test_a_learned_window_too_small_for_a_question_fails_the_run_saying_to_republish",
        ),
    ),
    Mutant(
        "adapt: a refusal the gateway adapts to is resent once",
        "adapt_not_asked",
        f"{_ENGINE}/_engine.py",
        "limit = self.engine.gateway.adapt(exc)",
        "limit = None",
        (
            "tests/engine/test_learned_window.py::test_a_refusal_the_gateway_adapts_to_is_announced_and_resent_once",
        ),
    ),
    Mutant(
        "adapt: asked once per call",
        "adapt_every_time",
        f"{_ENGINE}/_engine.py",
        "                if not adapted:",
        "                if True:",
        ("tests/engine/test_learned_window.py::test_the_gateway_is_asked_to_adapt_once_per_call",),
    ),
    # --- watching calls in flight (_watch) ------------------------------------------------------
    Mutant(
        "heartbeat: no renewal past the call's own deadline",
        "renew_past_deadline",
        f"{_ENGINE}/_watch.py",
        "        if flight.renew_until is not None and now >= flight.renew_until:",
        "        if False:",
        (
            "tests/engine/test_run_control.py::test_the_heartbeat_never_renews_past_the_calls_own_deadline",
        ),
    ),
    Mutant(
        "a lost lease closes a streamed call at once",
        "lost_lease_keeps_stream",
        f"{_ENGINE}/_watch.py",
        "            flight.call.lost.set()\n            flight.cancel()",
        "            flight.call.lost.set()\n            flight.call.cancelled.set()",
        ("tests/engine/test_run_control.py::test_a_lost_lease_closes_a_streamed_call_at_once",),
    ),
    # --- supplements (_context) ------------------------------------------------------------------
    Mutant(
        "supplements wait while a tool group is open",
        "supplement_inside_group",
        f"{_ENGINE}/_context.py",
        "if self.has_open_group or not state.queued_supplements:",
        "if not state.queued_supplements:",
        (
            "tests/engine/test_context.py::test_feedback_and_supplements_wait_until_the_tool_group_is_complete",
        ),
    ),
    Mutant(
        "a supplement is journaled once",
        "supplement_twice",
        f"{_ENGINE}/_context.py",
        "if not journaled and not queued:",
        "if not queued:",
        ("tests/engine/test_context.py::test_a_supplement_handed_out_twice_is_journaled_once",),
    ),
    Mutant(
        "a run never ends with supplements queued",
        "final_supplements_dropped",
        f"{_ENGINE}/_engine.py",
        "                self.context.queue_supplement(str(source_key), text)",
        "                pass",
        (
            "tests/engine/test_engine.py::test_a_supplement_arriving_during_the_last_step_is_journaled_and_answered",
        ),
    ),
    # --- projection and placeholders (_projection) -----------------------------------------------
    Mutant(
        "a call without a result gets status: unknown",
        "placeholder_missing",
        f"{_ENGINE}/_projection.py",
        "            if original not in group.answered:",
        "            if False:",
        (
            "tests/engine/test_projection.py::test_a_call_without_a_result_gets_an_unknown_result_that_forbids_assuming_success",
        ),
    ),
    Mutant(
        "a late result is kept as a note naming its call",
        "late_result_unnamed",
        f"{_ENGINE}/_projection.py",
        "        if key in self.calls:",
        "        if False:",
        (
            "tests/engine/test_projection.py::test_a_late_result_is_kept_as_history_material_without_breaking_protocol",
        ),
    ),
    Mutant(
        "projection per rendering: ids kept from rendering 3",
        "rendering_ids_rewritten",
        f"{_ENGINE}/_projection.py",
        "        if not self.rules.keeps_call_ids:",
        "        if True:",
        (
            "tests/engine/test_projection.py::test_history_keeps_the_session_unique_ids_a_run_gave_its_calls_from_rendering_3",
        ),
    ),
    Mutant(
        "projection per rendering: run states collapse from rendering 3",
        "rendering_states_long",
        f"{_ENGINE}/_projection.py",
        'elif kind == "status" and self.rules.collapses_notes:',
        'elif kind == "status" and False:',
        (
            "tests/engine/test_projection.py::test_run_states_in_a_row_collapse_into_one_short_note_from_rendering_3",
        ),
    ),
    Mutant(
        "projection per rendering: excerpts keep their run's reference from rendering 5",
        "rendering_refs_rewritten",
        f"{_ENGINE}/_projection.py",
        "            self.rules.keeps_run_refs\n",
        "            False\n",
        (
            "tests/engine/test_run_boundary.py::test_an_excerpt_keeps_its_run_reference_so_the_next_run_extends_the_last_request",
            "tests/engine/test_large_records.py::test_history_records_are_excerpted_and_read_from_the_journal",
        ),
    ),
    Mutant(
        "projection per rendering: notes are only appended from rendering 5",
        "rendering_states_merged",
        f"{_ENGINE}/_projection.py",
        "        if not self.rules.appends_notes and last is not None",
        "        if last is not None",
        ("tests/engine/test_run_boundary.py::test_projecting_more_records_only_appends_messages",),
    ),
    Mutant(
        "the journal's records carry their run's local seq into projection",
        "journal_without_local_seq",
        "sessions_app/selectors/history.py",
        "            local_seq=local_seq,",
        "            local_seq=None,",
        (
            "tests/sessions_app/test_run_boundary.py::test_a_new_run_extends_the_last_request_of_the_run_before_it",
        ),
    ),
    Mutant(
        "resume answers a pending call unknown",
        "resume_leaves_pending",
        f"{_ENGINE}/_engine.py",
        "        self.context.settle_pending()\n        for call_id, name in pending:",
        "        for call_id, name in pending:",
        (
            "tests/engine/test_engine.py::test_resume_answers_a_pending_call_as_unknown_and_never_runs_it_again",
        ),
    ),
    # --- redaction (_redaction, _context, _engine) -----------------------------------------------
    Mutant(
        "redaction of the model's messages",
        "redaction_assistant_skipped",
        f"{_ENGINE}/_context.py",
        "            self.redactor.value(message), keep_reasoning=self.rendering.keeps_reasoning",
        "            message, keep_reasoning=self.rendering.keeps_reasoning",
        (
            "tests/engine/test_context.py::test_the_models_messages_and_tool_results_are_redacted_before_they_are_recorded",
        ),
    ),
    Mutant(
        "redaction of streamed deltas split across pieces",
        "redaction_split_secret",
        f"{_ENGINE}/_redaction.py",
        "for size in range(min(len(text), longest - 1), 0, -1):",
        "for size in range(0):",
        (
            "tests/engine/test_streaming.py::test_a_key_split_across_two_chunks_never_reaches_a_delta",
        ),
    ),
    Mutant(
        "redaction of streamed reasoning",
        "redaction_reasoning_deltas",
        f"{_ENGINE}/_engine.py",
        "self._send(self.content.feed(content), self.reasoning.feed(reasoning), names)",
        "self._send(self.content.feed(content), reasoning, names)",
        (
            "tests/engine/test_streaming.py::test_a_key_split_across_two_reasoning_chunks_never_reaches_a_delta",
        ),
    ),
    Mutant(
        "redaction of tool results",
        "redaction_tool_result",
        f"{_ENGINE}/_context.py",
        """"content": self.redactor.text(content)}""",
        """"content": content}""",
        (
            "tests/engine/test_context.py::test_the_models_messages_and_tool_results_are_redacted_before_they_are_recorded",
        ),
    ),
    # --- large records (_large, _context) --------------------------------------------------------
    Mutant(
        "a large tool result shows as an excerpt",
        "large_result_whole",
        f"{_ENGINE}/_context.py",
        "            if chars is not None:",
        "            if False:",
        (
            "tests/engine/test_large_records.py::test_reading_a_record_in_slices_returns_all_of_it",
            "tests/engine/test_large_records.py::test_compaction_masks_older_tool_results_first_without_a_call",
        ),
    ),
    Mutant(
        "read-back slices stay within the limit",
        "read_back_unbounded",
        f"{_ENGINE}/_large.py",
        "if shown <= self.limit or chars == 0:",
        "if True:",
        ("tests/engine/test_large_records.py::test_reading_a_record_in_slices_returns_all_of_it",),
    ),
    # --- the integrity gate (_gate) and the output-limit field ------------------------------------
    Mutant(
        "tool-call ordering (gate and view): no reused call id",
        "gate_duplicate_ids",
        f"{_ENGINE}/_protocol.py",
        "            if call_id in issued:",
        "            if False:",
        ("tests/engine/test_gate.py::test_a_body_that_breaks_a_rule_is_refused_by_name",),
    ),
    Mutant(
        "gate: reasoning on every assistant message of a tool span",
        "gate_reasoning_missing",
        f"{_ENGINE}/_gate.py",
        '    if missing:\n        return [("reasoning"',
        '    if False:\n        return [("reasoning"',
        (
            "tests/providers/test_deepseek_thinking.py::test_a_payload_that_breaks_a_rule_never_reaches_the_gateway",
        ),
    ),
    Mutant(
        "gate: no run note in the user's voice",
        "gate_note_voice",
        f"{_ENGINE}/_gate.py",
        'if note and message.get("role") == "user":',
        "if False:",
        ("tests/engine/test_gate.py::test_a_body_that_breaks_a_rule_is_refused_by_name",),
    ),
    Mutant(
        "gate: the output limit in the provider's field only",
        "gate_other_limit_field",
        f"{_ENGINE}/_gate.py",
        "others = [name for name in OUTPUT_LIMIT_FIELDS if name != field and name in payload]",
        "others = []",
        ("tests/engine/test_gate.py::test_a_body_that_breaks_a_rule_is_refused_by_name",),
    ),
    Mutant(
        "OpenAI sends the limit as max_completion_tokens",
        "openai_limit_field",
        "agentloom/providers/chat.py",
        """payload_rules = PayloadRules(output_limit_field="max_completion_tokens")""",
        """payload_rules = PayloadRules(output_limit_field="max_tokens")""",
        (
            "tests/providers/test_chat.py::test_openai_sends_max_completion_tokens_and_no_max_tokens",
        ),
    ),
    # --- reasoning on any endpoint (_gateway, chat) ---------------------------------------------
    Mutant(
        "every reply's reasoning_content is kept, on every provider kind",
        "reasoning_dropped_on_parse",
        "agentloom/providers/chat.py",
        "    if isinstance(reasoning, str):",
        "    if False:",
        (f"{_REASONING}test_every_kind_keeps_the_reasoning_a_reply_carries",),
    ),
    Mutant(
        "Ollama's native answer keeps its thinking as reasoning_content",
        "ollama_thinking_dropped",
        "agentloom/providers/chat.py",
        """            reply.message["reasoning_content"] = thinking""",
        "            pass",
        (f"{_REASONING}test_ollamas_native_answer_keeps_its_thinking_and_never_sends_it_back",),
    ),
    Mutant(
        "any gateway declaring tool_spans passes reasoning back through the base",
        "tool_spans_stripped",
        f"{_ENGINE}/_gateway.py",
        """        if complete:\n            return {**body, "messages": messages}""",
        """        if False:\n            return {**body, "messages": messages}""",
        (
            "tests/engine/test_gateways.py::test_any_gateway_declaring_tool_spans_passes_reasoning_back_and_passes_its_own_gate",
            f"{_REASONING}test_tool_spans_is_never_refused",
        ),
    ),
    Mutant(
        "no reasoning to pass back: the request goes with thinking disabled",
        "fallback_keeps_thinking",
        f"{_ENGINE}/_gateway.py",
        """without_reasoning(request), "thinking": {"type": "disabled"}}""",
        """without_reasoning(request)}""",
        (
            "tests/engine/test_gateways.py::test_the_fallback_disables_thinking_and_logs_one_line_without_content",
            "tests/providers/test_deepseek_thinking.py::test_records_without_reasoning_are_sent_with_thinking_disabled",
        ),
    ),
    Mutant(
        "the fallback logs one warning line",
        "fallback_silent",
        f"{_ENGINE}/_gateway.py",
        "        self._warn_missing_reasoning(request)\n",
        "",
        (
            "tests/engine/test_gateways.py::test_the_fallback_disables_thinking_and_logs_one_line_without_content",
        ),
    ),
    Mutant(
        "the fallback's warning is one line, not one per measure",
        "fallback_logs_each_build",
        f"{_ENGINE}/_gateway.py",
        "        if missing in warned:\n            return",
        "        if False:\n            return",
        (
            "tests/engine/test_gateways.py::test_the_fallback_disables_thinking_and_logs_one_line_without_content",
        ),
    ),
    Mutant(
        "learned starts at never",
        "learned_starts_passing_back",
        "agentloom/providers/chat.py",
        'rule = "tool_spans" if self.reasoning == "tool_spans" else "never"',
        'rule = "never" if self.reasoning == "never" else "tool_spans"',
        (f"{_REASONING}test_learned_answers_the_refusal_once_by_passing_reasoning_back",),
    ),
    Mutant(
        "learned: a reasoning_missing refusal switches the rule to tool_spans",
        "adapt_changes_nothing",
        "agentloom/providers/chat.py",
        """        self.payload_rules = replace(rules, reasoning="tool_spans")\n""",
        "",
        (f"{_REASONING}test_learned_answers_the_refusal_once_by_passing_reasoning_back",),
    ),
    Mutant(
        "learned: answered once (a second refusal learns nothing)",
        "learned_reasoning_answered_twice",
        "agentloom/providers/chat.py",
        """            or rules.reasoning != "never"\n""",
        "",
        (f"{_REASONING}test_learned_answers_the_refusal_once_by_passing_reasoning_back",),
    ),
    Mutant(
        "learned: only a reasoning_missing refusal is learned from",
        "adapt_any_error",
        "agentloom/providers/chat.py",
        """            or getattr(error, "kind", None) != "reasoning_missing"\n""",
        "",
        (f"{_REASONING}test_learned_ignores_every_other_refusal",),
    ),
    Mutant(
        "with_thinking returns a new body",
        "with_thinking_mutates",
        "agentloom/providers/chat.py",
        "        body = dict(body)\n",
        "",
        (f"{_REASONING}test_with_thinking_returns_a_new_body",),
    ),
    Mutant(
        "DeepSeek under never sends tool-call spans with thinking disabled",
        "deepseek_never_keeps_thinking",
        "agentloom/providers/chat.py",
        """            body["thinking"] = {"type": "disabled"}""",
        "            pass",
        (f"{_REASONING}test_deepseek_with_never_sends_tool_spans_with_thinking_disabled",),
    ),
    # --- legacy adoption (_frame) ----------------------------------------------------------------
    Mutant(
        "a legacy frame loads with raw_complete false",
        "legacy_raw_complete",
        f"{_ENGINE}/_frame.py",
        """raw_complete=False if legacy else bool(context.get("raw_complete", True)),""",
        """raw_complete=bool(context.get("raw_complete", True)),""",
        ("tests/engine/test_frame.py::test_a_legacy_frame_without_records_loads_and_resumes",),
    ),
    # --- the view rule (reusable_views) ---------------------------------------------------------
    Mutant(
        "view rule: no pending tool calls",
        "view_guard_pending",
        _VIEWS,
        """    if state.get("pending_tool_calls"):""",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_resume_continues_the_original_run_without_later_questions",
            "tests/sessions_app/test_history.py::test_a_snapshot_waits_for_a_supplement_that_arrived_during_its_compaction",
        ),
    ),
    Mutant(
        "view rule: no queued supplements",
        "view_guard_supplements",
        _VIEWS,
        "    if _supplements_queued(run_id, state):",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_a_snapshot_waits_for_a_supplement_that_arrived_during_its_compaction",
        ),
    ),
    Mutant(
        "view rule: no terminal records outside the view",
        "view_guard_terminal",
        _VIEWS,
        """        return "terminal records inside the covered range are not in the view", None""",
        "        pass",
        (
            "tests/sessions_app/test_history.py::test_a_run_resumed_after_failing_saves_no_view_over_its_own_failure",
        ),
    ),
    Mutant(
        "view rule: an observed prefix (no interleaving)",
        "view_guard_interleaving",
        _VIEWS,
        "    if interleaved:",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_a_supplement_journaled_inside_a_compacting_run_is_seen_by_the_next_question",
            "tests/sessions_app/test_history.py::test_resume_continues_the_original_run_without_later_questions",
        ),
    ),
    Mutant(
        "view rule: every covered record journaled",
        "view_guard_contiguous",
        _VIEWS,
        "    if rows.count() != covered:",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_views_are_refused_with_queued_supplements_or_terminal_records",
        ),
    ),
    Mutant(
        "view choice: the binding must be equal",
        "view_choice_any_binding",
        "sessions_app/selectors/views.py",
        "session=session, binding_key=binding_key(binding), revoked_at__isnull=True",
        "session=session, revoked_at__isnull=True",
        (
            "tests/sessions_app/test_history.py::test_a_compacted_view_is_saved_and_reused_by_the_next_run",
        ),
    ),
    Mutant(
        "view choice: never a revoked view",
        "view_choice_revoked",
        "sessions_app/selectors/views.py",
        "session=session, binding_key=binding_key(binding), revoked_at__isnull=True",
        "session=session, binding_key=binding_key(binding)",
        (
            "tests/sessions_app/test_view_revocation.py::test_a_revoked_view_is_never_chosen_and_stays_on_record",
        ),
    ),
    # --- journal references (reusable_views) -----------------------------------------------------
    Mutant(
        "references: written once, under the snapshot a view is saved from",
        "references_twice",
        _VIEWS,
        "    # The view writes no references of its own:",
        "    reference_rows(session_id, refs, view=view)  #",
        (
            "tests/sessions_app/test_references.py::test_references_are_written_once_and_every_reader_finds_them",
            "tests/sessions_app/test_checkpoints.py::test_views_store_only_what_exists_nowhere_else",
        ),
    ),
    Mutant(
        "references: one row per range of consecutive records",
        "references_per_record",
        _VIEWS,
        """    ranges = reference_ranges(session_id, {ref["s"] for ref in refs if "s" in ref})""",
        """    ranges = [[s, s] for s in sorted({ref["s"] for ref in refs if "s" in ref})]""",
        (
            "tests/sessions_app/test_references.py::test_references_are_written_once_and_every_reader_finds_them",
        ),
    ),
    Mutant(
        "references: a range runs across the status records between turns",
        "references_split_at_status",
        _VIEWS,
        "        if all(seq in statuses for seq in range(joined[-1][1] + 1, first)):",
        "        if False:",
        (
            "tests/sessions_app/test_references.py::test_references_are_written_once_and_every_reader_finds_them",
            "tests/sessions_app/test_references.py::test_a_summary_stands_for_a_long_prefix_in_one_range",
        ),
    ),
    Mutant(
        "references: both ends of a range are held (RESTRICT)",
        "range_end_cascades",
        "sessions_app/models.py",
        """        on_delete=models.RESTRICT,\n        related_name="range_ends",""",
        """        on_delete=models.CASCADE,\n        related_name="range_ends",""",
        (
            "tests/sessions_app/test_references.py::test_a_range_keeps_its_ends_and_goes_with_its_session",
            "tests/sessions_app/test_checkpoints.py::test_a_referenced_journal_record_cannot_be_deleted",
        ),
    ),
    Mutant(
        "view rule: no reusable view for a compaction that only masked",
        "view_after_masking",
        _VIEWS,
        "    if _only_masked(snapshot) and not compaction_of(binding).keeps_masks:",
        "    if False:",
        ("tests/sessions_app/test_references.py::test_a_masking_only_compaction_saves_no_view",),
    ),
    Mutant(
        "reference migration: a batch continues the range the last one ended",
        "migration_seams",
        _VIEWS,
        "    if before is not None and not (",
        "    if False and not (",
        (
            "tests/sessions_app/test_references.py::test_the_reference_migration_is_resumable_and_idempotent",
        ),
    ),
    Mutant(
        "reference migration: a view's copies of its snapshot's references are dropped",
        "migration_keeps_view_copies",
        _VIEWS,
        "            kept = referenced_seqs(",
        "            kept = set() and referenced_seqs(",
        (
            "tests/sessions_app/test_references.py::test_the_reference_migration_is_resumable_and_idempotent",
        ),
    ),
    # --- discovery and connections --------------------------------------------------------------
    Mutant(
        "provider client follows no redirect",
        "redirect_followed",
        "agentloom/providers/_http.py",
        "                if 300 <= status < 400:",
        "                if False:",
        ("tests/providers/test_http.py::test_redirects_are_errors_and_never_followed",),
    ),
    Mutant(
        "provider client caps the body",
        "body_uncapped",
        "agentloom/providers/_http.py",
        "return _read_capped(response, self.max_response_bytes, deadline, strict=True)",
        "return _read_capped(response, 1 << 40, deadline, strict=True)",
        ("tests/providers/test_http.py::test_a_body_over_the_declared_cap_is_refused",),
    ),
    Mutant(
        "a stored key goes only to its endpoint",
        "key_reused_elsewhere",
        "models_app/services/connections.py",
        "        if not same_endpoint(current, provider, base_url):",
        "        if False:",
        ("tests/models_app/test_services.py::test_a_changed_endpoint_needs_the_key_again",),
    ),
    Mutant(
        "window source: the manifest only on official endpoints",
        "manifest_on_custom_endpoint",
        "agentloom/providers/discovery.py",
        "listed = manifest.lookup(provider, model_id) if official else None",
        "listed = manifest.lookup(provider, model_id)",
        ("tests/providers/test_discovery.py::test_a_custom_endpoint_never_gets_manifest_values",),
    ),
    Mutant(
        "window source: the provider's figure first",
        "provider_window_ignored",
        "agentloom/providers/discovery.py",
        "    elif window is not None:\n        source, source_url, verified_on",
        "    elif False:\n        source, source_url, verified_on",
        ("tests/providers/test_discovery.py::test_each_provider_lists_models_over_http",),
    ),
    Mutant(
        "window source: the manifest by exact model id",
        "manifest_by_prefix",
        "agentloom/providers/manifest.py",
        "        return self.entries.get((provider, model_id))",
        "        return self.entries.get((provider, model_id)) or next((e for (p, m), e in "
        "self.entries.items() if p == provider and model_id.startswith(m)), None)",
        (
            "tests/providers/test_discovery.py::test_the_official_endpoint_gets_manifest_values_for_exact_ids_only",
        ),
    ),
    # --- what self-hosted servers say: length refusals, broken streams, tokenizers, props ------
    Mutant(
        "length refusal: llama.cpp's n_ctx field is the window",
        "refusal_n_ctx_ignored",
        "agentloom/providers/_refusals.py",
        '        window = _size(error.get("n_ctx"))',
        "        window = None",
        (
            "tests/providers/test_length_refusals.py::test_each_wording_is_a_length_refusal_with_its_numbers",
        ),
    ),
    Mutant(
        "length refusal: recognised in a 5xx answer too",
        "refusal_5xx_upstream",
        "agentloom/providers/_http.py",
        "    if status not in (404, 408, 429):",
        "    if status is None or status < 500:",
        (
            "tests/providers/test_length_refusals.py::test_each_wording_is_a_length_refusal_with_its_numbers",
        ),
    ),
    Mutant(
        "length refusal: a 429 stays a rate limit",
        "refusal_rate_limit_as_window",
        "agentloom/providers/_http.py",
        "    if status not in (404, 408, 429):",
        "    if status not in (404, 408):",
        (
            "tests/providers/test_length_refusals.py::test_a_rate_limit_that_names_tokens_is_still_a_rate_limit",
        ),
    ),
    Mutant(
        "length refusal: evidence is rebuilt, never the server's text",
        "refusal_evidence_raw",
        "agentloom/providers/_refusals.py",
        "        evidence=evidence_for(window, requested),",
        "        evidence=text,",
        (
            "tests/providers/test_length_refusals.py::test_each_wording_is_a_length_refusal_with_its_numbers",
        ),
    ),
    Mutant(
        "length refusal: its numbers survive pickling",
        "refusal_numbers_unpickled",
        "agentloom/providers/_errors.py",
        "        window=window,\n        requested=requested,\n        evidence=evidence,\n"
        "        input_tokens=input_tokens,\n    )",
        "        evidence=evidence,\n    )",
        ("tests/providers/test_length_refusals.py::test_the_numbers_survive_pickling",),
    ),
    Mutant(
        "stream: an empty end is retried like a connection error",
        "empty_end_not_retried",
        "agentloom/providers/_stream.py",
        '                raise ProviderError("upstream", EMPTY_END, retryable=True)',
        '                raise ProviderError("upstream", EMPTY_END, retryable=False)',
        (
            "tests/providers/test_stream_ends.py::test_an_empty_stream_is_retried_once_and_a_good_answer_then_kept",
        ),
    ),
    Mutant(
        "stream: a second empty end is probed, not retried again",
        "empty_end_twice_retried",
        "agentloom/providers/chat.py",
        "                        if empty_ends > 1:",
        "                        if empty_ends > 2:",
        (
            "tests/providers/test_stream_ends.py::test_an_empty_stream_whose_probe_fails_raises_that_error_once",
        ),
    ),
    Mutant(
        "stream: a second empty end is answered by the unstreamed probe",
        "empty_end_refused_without_probe",
        "agentloom/providers/chat.py",
        "                            document = self._probe(client, payload, stream)",
        '                            raise ProviderError("context_length") from None',
        (
            "tests/providers/test_stream_ends.py::test_after_two_empty_streams_the_unstreamed_probe_names_the_window",
            "tests/providers/test_stream_ends.py::test_an_empty_stream_whose_probe_answers_is_a_successful_call_and_tools_go_unstreamed_after",
            "tests/providers/test_stream_ends.py::test_an_empty_stream_whose_probe_fails_raises_that_error_once",
        ),
    ),
    Mutant(
        "a server of unknown make is sent tool_choice auto beside its tools",
        "tool_choice_left_to_the_server",
        "agentloom/providers/chat.py",
        '        body["tool_choice"] = "auto"',
        "        pass",
        (
            "tests/providers/test_stream_ends.py::test_a_server_of_unknown_make_gets_openais_defaults_written_out",
            "tests/sessions_app/test_real_servers.py::test_tools_reach_a_server_that_renders_them_only_when_asked_and_answers_null_content_500",
        ),
    ),
    Mutant(
        'a server of unknown make is sent content "" beside tool calls, never null',
        "null_content_sent",
        "agentloom/providers/chat.py",
        '        {**message, "content": ""}\n        if message.get("role") == "assistant"',
        '        {**message, "content": None}\n        if message.get("role") == "assistant"',
        (
            "tests/providers/test_stream_ends.py::test_a_server_of_unknown_make_gets_openais_defaults_written_out",
            "tests/sessions_app/test_real_servers.py::test_tools_reach_a_server_that_renders_them_only_when_asked_and_answers_null_content_500",
        ),
    ),
    Mutant(
        "OpenAI and DeepSeek keep their bodies: their defaults are not written out",
        "defaults_spelled_for_openai",
        "agentloom/providers/chat.py",
        '    default_reasoning = "never"\n    spells_out_defaults = False',
        '    default_reasoning = "never"\n    spells_out_defaults = True',
        (
            "tests/providers/test_stream_ends.py::test_a_server_of_unknown_make_gets_openais_defaults_written_out",
        ),
    ),
    Mutant(
        "requests with tools go unstreamed once a stream with tools was answered only unstreamed",
        "tools_streamed_after_the_probe",
        "agentloom/providers/chat.py",
        "            self.tools_unstreamed = True",
        "            self.tools_unstreamed = False",
        (
            "tests/providers/test_stream_ends.py::test_an_empty_stream_whose_probe_answers_is_a_successful_call_and_tools_go_unstreamed_after",
            "tests/sessions_app/test_real_servers.py::test_tools_reach_a_server_that_renders_them_only_when_asked_and_answers_null_content_500",
        ),
    ),
    Mutant(
        "compaction 5 measures every size of an attempt with the hard check's bound",
        "compaction_measures_the_estimate",
        f"{_ENGINE}/_compaction_versions.py",
        "    keeps_masks=True,\n    measures_bound=True,",
        "    keeps_masks=True,\n    measures_bound=False,",
        (
            "tests/engine/test_server_count.py::test_a_request_whose_bound_is_over_the_budget_is_compacted_though_its_estimate_is_not",
            "tests/sessions_app/test_real_servers.py::test_a_typed_in_window_with_the_server_tokenizer_is_never_refused",
        ),
    ),
    Mutant(
        "the beat purges what the retention rule hid only after RETENTION_PURGE_DAYS",
        "retention_purge_without_grace",
        "sessions_app/services/retention.py",
        "    before = (now or timezone.now()) - timedelta(days=settings.RETENTION_PURGE_DAYS)",
        "    before = (now or timezone.now()) + timedelta(days=365)",
        (
            "tests/sessions_app/test_retention.py::test_the_beat_purges_what_the_rule_hid_after_the_grace_and_nothing_else",
        ),
    ),
    Mutant(
        "the beat purges only sessions the retention rule hid, never one a person hid",
        "retention_purges_any_deletion",
        "sessions_app/services/deletion.py",
        "session_number=session_id, by_retention=True, purged_at__isnull=True,",
        "session_number=session_id, purged_at__isnull=True,",
        (
            "tests/sessions_app/test_retention.py::test_the_beat_purges_what_the_rule_hid_after_the_grace_and_nothing_else",
        ),
    ),
    Mutant(
        "a legal hold placed during the grace keeps a session from the retention purge",
        "retention_purge_ignores_hold",
        "sessions_app/services/deletion.py",
        "        .filter(pk=session_id, deleted_at__isnull=False, legal_hold=False)",
        "        .filter(pk=session_id, deleted_at__isnull=False)",
        (
            "tests/sessions_app/test_retention.py::test_the_beat_purges_what_the_rule_hid_after_the_grace_and_nothing_else",
        ),
    ),
    Mutant(
        "each stage of a compaction attempt is a span of its own",
        "compaction_stages_unspanned",
        "sessions_app/services/execution.py",
        '            if kind == "compaction":\n                _stage_spans(engine_late)',
        '            if kind == "no compaction":\n                _stage_spans(engine_late)',
        (
            "tests/sessions_app/test_tracing.py::test_a_compaction_span_lasts_its_work_and_holds_its_summary_call",
        ),
    ),
    Mutant(
        "the OpenAI-format export starts with the system prompt a run asked now starts with",
        "openai_export_without_pins",
        "sessions_app/services/export.py",
        "    system = pinned_prompt(session.agent_version.snapshot, session.pinned)",
        '    system = session.agent_version.snapshot.get("system_prompt") or ""',
        ("tests/sessions_app/test_export.py::test_the_openai_format_is_the_main_conversation",),
    ),
    Mutant(
        "a tool a server runs only as a task is listed unavailable",
        "task_tools_offered",
        "models_app/services/tool_servers.py",
        "    elif tool.requires_tasks:",
        "    elif False:",
        (
            "tests/sessions_app/test_reference_tool_server.py::test_a_tool_that_requires_tasks_is_listed_as_unavailable",
        ),
    ),
    Mutant(
        "a refusal's count of the input is read where the words say it apart",
        "input_count_unread",
        "agentloom/providers/_refusals.py",
        "        counted = counted or _first(_INPUT_WORDS, text)",
        "        counted = counted",
        (
            "tests/providers/test_length_refusals.py::test_each_wording_says_what_the_input_alone_held_where_it_says_it_apart",
        ),
    ),
    Mutant(
        "a server counting more than the measure teaches the named window in the measure's units",
        "counted_window_ignored",
        f"{_ENGINE}/_budget.py",
        "    elif named is not None and counted is not None and counted > refused:",
        "    elif False:",
        (
            "tests/engine/test_learned_window.py::test_the_rule_learns_the_named_window_else_the_largest_success_never_above_the_budget",
            "tests/engine/test_learned_window.py::test_a_server_counting_more_than_the_measure_teaches_the_window_in_the_measures_units",
        ),
    ),
    Mutant(
        "stream: the probe is sent without streaming",
        "probe_streamed",
        "agentloom/providers/chat.py",
        '        body["stream"] = False',
        '        body["stream"] = True',
        (
            "tests/providers/test_stream_ends.py::test_after_two_empty_streams_the_unstreamed_probe_names_the_window",
        ),
    ),
    Mutant(
        "a learned window keeps the output limit's and margin's shares of the window",
        "learned_window_reservation_unfitted",
        f"{_ENGINE}/_budget.py",
        "        output = self.max_output_tokens * window // self.context_window",
        "        output = self.max_output_tokens",
        (
            "tests/engine/test_budget.py::test_a_smaller_window_keeps_the_reservations_shares_of_it",
            "tests/sessions_app/test_real_servers.py::test_a_learned_window_keeps_the_reservations_shares_and_the_session_goes_on",
        ),
    ),
    Mutant(
        "stream: a break after content is not retried",
        "cut_short_retried",
        "agentloom/providers/_stream.py",
        '            raise ProviderError("protocol", _CUT_SHORT, retryable=False)',
        '            raise ProviderError("protocol", _CUT_SHORT, retryable=True)',
        (
            "tests/providers/test_stream_ends.py::test_a_stream_that_breaks_after_content_is_a_clear_error_not_retried",
        ),
    ),
    Mutant(
        "stream: an error event after content is not retried",
        "stream_error_retried_after_content",
        "agentloom/providers/_http.py",
        "            if reader is not None and reader.shown() and failure.retryable:",
        "            if False:",
        (
            "tests/providers/test_stream_ends.py::test_a_server_error_event_after_content_is_not_retried",
        ),
    ),
    Mutant(
        "stream: llama.cpp's error: line is an error",
        "error_line_ignored",
        "agentloom/providers/_stream.py",
        '            elif line.startswith(b"error:"):',
        '            elif line.startswith(b"never:"):',
        (
            "tests/providers/test_stream_ends.py::test_an_old_llama_cpp_error_line_is_read_as_the_error_it_is",
        ),
    ),
    Mutant(
        "stream: no usage is None, never zeros",
        "stream_usage_zeros",
        "agentloom/providers/_stream.py",
        '            "usage": self.usage,',
        '            "usage": self.usage or {"prompt_tokens": 0, "completion_tokens": 0},',
        (
            "tests/providers/test_stream_ends.py::test_a_stream_without_usage_gives_no_usage_never_zeros",
        ),
    ),
    Mutant(
        "server tokenizer: at the connection's origin only",
        "tokenizer_under_base_path",
        "agentloom/providers/server_tokens.py",
        "        self.url = origin_url(endpoint.base_url, path)",
        '        self.url = endpoint.base_url.rstrip("/") + path',
        (
            "tests/providers/test_server_tokens.py::test_each_server_counts_in_its_own_shape_at_the_origin",
        ),
    ),
    Mutant(
        "server tokenizer: one count call is bounded in time",
        "tokenizer_unbounded",
        "agentloom/providers/server_tokens.py",
        "            client.total_timeout = min(client.total_timeout, left)",
        "            pass",
        ("tests/providers/test_server_tokens.py::test_one_count_call_is_bounded_in_time",),
    ),
    Mutant(
        "server tokenizer: each distinct text counted once",
        "tokenizer_counts_duplicates",
        "agentloom/providers/server_tokens.py",
        "        pending = [text for text in dict.fromkeys(texts) if text not in counts]",
        "        pending = [text for text in texts if text not in counts]",
        (
            "tests/providers/test_server_tokens.py::test_each_server_counts_in_its_own_shape_at_the_origin",
        ),
    ),
    Mutant(
        "server tokenizer: counts are kept for the process",
        "tokenizer_counts_per_call",
        "agentloom/providers/server_tokens.py",
        "        self.shared = shared",
        "        self.shared = False",
        (
            "tests/providers/test_server_tokens.py::test_counts_are_kept_for_the_process_per_origin_route_and_model",
            "tests/sessions_app/test_real_servers.py::test_a_later_run_sends_the_tokenizer_only_texts_it_never_counted",
        ),
    ),
    Mutant(
        "server tokenizer: process counts are per server model",
        "tokenizer_counts_any_model",
        "agentloom/providers/server_tokens.py",
        "        return (self._origin, self.route, self.model_id, digest)",
        '        return (self._origin, self.route, "", digest)',
        (
            "tests/providers/test_server_tokens.py::test_counts_are_kept_for_the_process_per_origin_route_and_model",
        ),
    ),
    Mutant(
        "server tokenizer: the process counts are bounded",
        "tokenizer_counts_unbounded",
        "agentloom/providers/server_tokens.py",
        "            while len(self._counts) > self.max_items:",
        "            while False:",
        (
            "tests/providers/test_server_tokens.py::test_the_process_cache_is_bounded_least_recently_used_first",
        ),
    ),
    Mutant(
        "server tokenizer: the probe always asks the server",
        "tokenizer_probe_cached",
        "agentloom/providers/server_tokens.py",
        "            endpoint, route, calls=calls, time_limit=_PROBE_SECONDS, shared=False",
        "            endpoint, route, calls=calls, time_limit=_PROBE_SECONDS, shared=True",
        (
            "tests/providers/test_server_tokens.py::test_counts_are_kept_for_the_process_per_origin_route_and_model",
        ),
    ),
    Mutant(
        "server tokenizer: a whole request counts its tool schemas",
        "tokenizer_request_without_tools",
        "agentloom/providers/server_tokens.py",
        '            body["tools"] = list(tools)',
        "            pass",
        (
            "tests/providers/test_server_tokens.py::test_a_whole_request_is_counted_as_the_server_renders_it",
        ),
    ),
    Mutant(
        "window source: /props is read as server_props",
        "props_source_lost",
        "agentloom/providers/local_servers.py",
        '            found[model_id] = ((window, "server_props", None), props_url)',
        '            found[model_id] = ((window, "provider", None), props_url)',
        (
            "tests/providers/test_discovery.py::test_llama_cpp_props_give_the_window_of_its_one_model",
        ),
    ),
    Mutant(
        "window source: /props of an unnamed model among several is not guessed",
        "props_window_guessed",
        "agentloom/providers/local_servers.py",
        "    return model_ids if len(model_ids) == 1 else []",
        "    return model_ids",
        (
            "tests/providers/test_discovery.py::test_props_of_an_unnamed_model_among_several_are_not_guessed",
        ),
    ),
    Mutant(
        "window source: a missing server route changes nothing",
        "props_route_error_fatal",
        "agentloom/providers/local_servers.py",
        "    except ProviderError as error:\n        # A route this server does not have",
        "    except KeyError as error:\n        # A route this server does not have",
        ("tests/providers/test_discovery.py::test_missing_server_routes_are_silent",),
    ),
    # --- reading sessions, access, approval -----------------------------------------------------
    Mutant(
        "journal paging: an empty page keeps the cursor",
        "journal_cursor_reset",
        "sessions_app/selectors/journal.py",
        """"next_after": items[-1]["seq"] if items else after""",
        """"next_after": items[-1]["seq"] if items else 0""",
        ("tests/api/test_journal.py::test_an_empty_page_keeps_the_cursor",),
    ),
    Mutant(
        "journal paging: at most `limit` records",
        "journal_page_unbounded",
        "sessions_app/selectors/journal.py",
        """.values(*JOURNAL_ITEM_FIELDS)[:limit]""",
        """.values(*JOURNAL_ITEM_FIELDS)""",
        (
            "tests/api/test_journal.py::test_defaults_are_after_0_and_limit_100",
            "tests/api/test_journal.py::test_paging_a_thousand_records_returns_each_once_in_order",
        ),
    ),
    Mutant(
        "only the session's creator reads it",
        "sessions_shared_in_space",
        "sessions_app/selectors/sessions.py",
        "live_sessions().filter(created_by=user, space__memberships__user=user)",
        "live_sessions().filter(space__memberships__user=user)",
        (
            "tests/api/test_access.py::test_sessions_and_runs_belong_to_their_creator",
            "tests/api/test_access.py::test_sessions_are_not_listed_to_others",
        ),
    ),
    Mutant(
        "approval by the session's creator only",
        "approval_by_anyone",
        "sessions_app/services/approvals.py",
        "    if run.session.created_by_id != user.pk:\n        raise NotFound",
        "    if False:\n        raise NotFound",
        (
            "tests/sessions_app/test_approvals.py::test_only_the_sessions_creator_decides",
            "tests/api/test_approvals.py::test_a_member_who_is_not_the_creator_is_refused",
        ),
    ),
    # --- a tool server's questions to the person (_asking, toolservers, services.questions) -----
    Mutant(
        "a server's questions and answers are journaled after the tool group",
        "questions_journaled_inside_the_group",
        f"{_ENGINE}/_engine.py",
        "        if self.run_tools(calls):\n            self.save()\n",
        "        if self.run_tools(calls):\n            self.journal_asked()\n",
        (
            "tests/sessions_app/test_questions.py::test_an_answered_round_sends_the_same_call_with_the_answers",
        ),
    ),
    Mutant(
        "the run continues by sending the same call with the answers",
        "answers_not_sent",
        "agentloom/toolservers/_tool.py",
        "input_responses=reply.responses if reply is not None else None,",
        "input_responses=None,",
        (
            "tests/sessions_app/test_questions.py::test_an_answered_round_sends_the_same_call_with_the_answers",
        ),
    ),
    Mutant(
        "the call goes again with the server's request state as it came",
        "request_state_dropped",
        "agentloom/toolservers/_tool.py",
        "request_state=reply.request_state if reply is not None else None,",
        "request_state=None,",
        (
            "tests/sessions_app/test_questions.py::test_an_answered_round_sends_the_same_call_with_the_answers",
        ),
    ),
    Mutant(
        "elicitation is declared only where a person can answer",
        "elicitation_declared_everywhere",
        "agentloom/toolservers/_tool.py",
        "                may_ask=person is not None,",
        "                may_ask=True,",
        (
            "tests/toolservers/test_questions.py::test_a_server_tool_no_person_can_answer_declares_no_elicitation",
        ),
    ),
    Mutant(
        "a question asked during a call waits no longer than the call has left, less the margin",
        "person_waited_past_the_call",
        "agentloom/toolservers/_client.py",
        "        seconds = self.deadline - time.monotonic() - ANSWER_MARGIN_SECONDS",
        "        seconds = self.deadline - time.monotonic() + ANSWER_MARGIN_SECONDS",
        (
            "tests/sessions_app/test_questions.py::test_a_2025_elicitation_no_one_answers_in_time_is_declined",
        ),
    ),
    Mutant(
        "a run waiting for answers holds no lease",
        "waiting_for_answers_keeps_the_lease",
        "sessions_app/services/execution.py",
        '        lease_owner="",\n        lease_expires_at=None,\n'
        "        pending_questions=questions,",
        "        lease_owner=owner,\n        lease_expires_at=None,\n"
        "        pending_questions=questions,",
        (
            "tests/sessions_app/test_questions.py::test_an_input_required_call_waits_and_holds_no_worker_or_lease",
        ),
    ),
    Mutant(
        "only the session's creator answers a server's questions",
        "answer_by_anyone",
        "sessions_app/services/questions.py",
        "    if run.session.created_by_id != user.pk:\n        raise NotFound",
        "    if False:\n        raise NotFound",
        (
            "tests/sessions_app/test_questions.py::test_answers_are_checked_against_the_form_and_taken_once",
            "tests/api/test_questions.py::test_someone_else_gets_404",
        ),
    ),
    Mutant(
        "each question is answered once",
        "answer_taken_twice",
        "sessions_app/services/questions.py",
        "    if key in (run.question_answers or {}):\n        raise Conflict",
        "    if False:\n        raise Conflict",
        ("tests/api/test_questions.py::test_an_answer_is_202_with_the_queued_run_a_second_409",),
    ),
    Mutant(
        "an accepted form's content is checked against its fields",
        "answer_unchecked",
        "sessions_app/services/questions.py",
        "        return checked_content(question, content)",
        "        return content",
        (
            "tests/sessions_app/test_questions.py::test_answers_are_checked_against_the_form_and_taken_once",
            "tests/api/test_questions.py::test_bad_answers_are_400_naming_the_field",
        ),
    ),
    Mutant(
        "a URL question is accepted only once its URL is confirmed",
        "url_accepted_unconfirmed",
        "sessions_app/services/questions.py",
        "        if url_confirmed is not True:",
        "        if False:",
        (
            "tests/sessions_app/test_questions.py::test_a_url_question_is_accepted_only_once_its_url_is_confirmed",
        ),
    ),
    Mutant(
        "a replay meets a server's questions as the run did, with the answers it got",
        "replay_forgets_the_questions",
        "sessions_app/services/replay.py",
        "    asked = _Asked(run.question_rounds or [])",
        "    asked = _Asked([])",
        (
            "tests/sessions_app/test_questions.py::test_an_answered_round_sends_the_same_call_with_the_answers",
        ),
    ),
    Mutant(
        "a server's text is escaped where the console shows it",
        "server_text_unescaped",
        "templates/console/_live_summary.html",
        '<p class="server-text">{{ q.message }}</p>',
        '<p class="server-text">{{ q.message|safe }}</p>',
        (
            "tests/api/test_questions.py::test_the_panel_shows_the_form_with_the_servers_text_escaped",
        ),
    ),
    # --- live deltas go when their run ends (live, journal, deletion) ---------------------------
    Mutant(
        "a run's deltas go when its terminal save journals its end",
        "deltas_kept_after_the_terminal_save",
        "sessions_app/services/journal.py",
        "                forget_run(self.run_id)\n",
        "                pass\n",
        (
            "tests/sessions_app/test_streaming_runs.py::test_a_runs_deltas_are_deleted_when_it_succeeds",
            "tests/api/test_run_events.py::test_a_stream_resumed_after_its_runs_deltas_were_deleted_gets_the_records",
        ),
    ),
    Mutant(
        "a run ended outside its engine (cancel, sweep) loses its deltas too",
        "deltas_kept_after_a_status_journal",
        "sessions_app/services/journal.py",
        "    forget_run(run.pk)\n",
        "",
        (
            "tests/sessions_app/test_streaming_runs.py::test_a_runs_deltas_are_deleted_when_it_is_cancelled_or_swept",
        ),
    ),
    Mutant(
        "a deleted session's deltas go with it",
        "deltas_kept_after_session_delete",
        "sessions_app/services/deletion.py",
        "    forget_session(locked.pk)\n",
        "",
        ("tests/sessions_app/test_streaming_runs.py::test_a_deleted_sessions_deltas_go_with_it",),
    ),
    Mutant(
        "the database channel deletes only the runs it is given",
        "deltas_forget_every_run",
        "sessions_app/services/live.py",
        "RunDelta.objects.filter(run_id__in=list(run_ids)).delete()",
        "RunDelta.objects.all().delete()",
        ("tests/sessions_app/test_streaming_runs.py::test_a_deleted_sessions_deltas_go_with_it",),
    ),
    # --- worker processes per machine (config, work) -------------------------------------------
    Mutant(
        "SQLite runs one worker process",
        "worker_processes_on_sqlite",
        "agentloom/config.py",
        "        if asked > 1:",
        "        if False:",
        (
            "tests/foundation/test_worker_processes.py::test_a_bad_worker_setting_stops_start_up_naming_it",
        ),
    ),
    Mutant(
        "PostgreSQL runs a worker process per core by default",
        "worker_processes_default_one",
        "agentloom/config.py",
        "    return asked or machine_cores()",
        "    return asked or 1",
        (
            "tests/foundation/test_worker_processes.py::test_postgresql_runs_a_worker_process_per_core_and_sqlite_one",
        ),
    ),
    Mutant(
        "only the first worker process runs the beat",
        "worker_beat_in_every_process",
        "agentloom/work.py",
        "    if beat and index == 1:",
        "    if beat:",
        (
            "tests/foundation/test_worker_processes.py::test_each_worker_process_is_named_apart_and_only_the_first_runs_the_beat",
        ),
    ),
    Mutant(
        "a stop reaches each worker process once (their own process groups)",
        "worker_shares_the_launchers_group",
        "agentloom/work.py",
        "subprocess.Popen(command, process_group=0)",
        "subprocess.Popen(command)",
        (
            "tests/foundation/test_worker_processes.py::test_a_stop_signal_reaches_every_worker_process_once",
        ),
    ),
    Mutant(
        "a worker process that ends stops the set with its status",
        "worker_end_ignored",
        "agentloom/work.py",
        "return status or 1  # a worker that ends unasked is a failure",
        "return 0",
        (
            "tests/foundation/test_worker_processes.py::test_when_one_worker_process_ends_the_others_stop_and_its_status_is_the_sets",
        ),
    ),
    # --- a journal page costs what it shows (console fragments, presenters, serializers) --------
    Mutant(
        "a journal page reads the runs of its records only",
        "journal_page_reads_every_run",
        "sessions_app/console/fragments.py",
        'runs = runs_of(session).filter(pk__in={item["run_id"] for item in items})\n    runs = {',
        "runs = runs_of(session)\n    runs = {",
        (
            "tests/console/test_journal_page_cost.py::test_a_journal_page_of_200_records_costs_the_same_in_a_session_twice_as_long",
        ),
    ),
    Mutant(
        "a journal page decrypts none of its runs' questions and answers",
        "journal_page_decrypts_its_runs",
        "sessions_app/console/fragments.py",
        'runs.only("pk", "number", "status")',
        "runs",
        (
            "tests/console/test_journal_page_cost.py::test_a_journal_page_of_200_records_costs_the_same_in_a_session_twice_as_long",
        ),
    ),
    Mutant(
        "naming a page's tool results reads no record past the page's start",
        "journal_names_read_past_the_start",
        "sessions_app/console/fragments.py",
        "instance=instance, upto=after):",
        "instance=instance):",
        (
            "tests/console/test_journal_page_cost.py::test_a_journal_page_of_200_records_costs_the_same_in_a_session_twice_as_long",
        ),
    ),
    Mutant(
        "a page's first run is found by its id, not read",
        "journal_first_run_read_whole",
        "sessions_app/console/fragments.py",
        '.filter(pk__in={item["run_id"] for item in items}).only("pk")',
        '.filter(pk__in={item["run_id"] for item in items})',
        (
            "tests/console/test_journal_page_cost.py::test_a_journal_page_of_200_records_costs_the_same_in_a_session_twice_as_long",
        ),
    ),
    Mutant(
        "the JSON page writes moments as its serializer does",
        "journal_json_raw_moment",
        "sessions_app/serializers.py",
        '{**item, "created_at": moment(item["created_at"])}',
        "dict(item)",
        ("tests/api/test_journal.py::test_a_page_reads_as_its_serializer_writes_it",),
    ),
    Mutant(
        "a journal row's moment is in the site's time zone",
        "journal_row_moment_in_utc",
        "sessions_app/console/presenters.py",
        'moment = timezone.localtime(shown["created_at"])',
        'moment = shown["created_at"]',
        (
            "tests/console/test_journal_page_cost.py::test_a_rows_moment_is_written_in_the_sites_time_zone",
        ),
    ),
    # --- what a connection learns from its server (application) -------------------------------
    Mutant(
        "a learned window never raises the connection's window",
        "learned_window_raises",
        "models_app/services/connections.py",
        "        if value >= connection.context_window:\n            return False",
        "        if False:\n            return False",
        (
            "tests/models_app/test_learned_limits.py::test_a_learned_window_never_raises_the_window",
            "tests/models_app/test_learned_limits.py::test_a_learned_window_is_recorded_once_with_its_evidence_and_an_audit_row",
        ),
    ),
    Mutant(
        "a learned reasoning rule is recorded once",
        "learned_reasoning_twice",
        "models_app/services/connections.py",
        "        if connection.learned_reasoning == value:\n            return False",
        "        if False:\n            return False",
        (
            "tests/models_app/test_learned_limits.py::test_a_learned_reasoning_rule_is_recorded_once",
        ),
    ),
    Mutant(
        "nothing learned is recorded on a connection that now serves another model",
        "learned_on_another_model",
        "models_app/services/connections.py",
        "(serves and (connection.provider, connection.model_id) != serves)",
        "(False)",
        (
            "tests/sessions_app/test_learned_runs.py::"
            "test_nothing_is_recorded_on_a_connection_that_now_serves_another_model",
        ),
    ),
    Mutant(
        "a person's window edit overrides the learned window",
        "learned_window_survives_edit",
        "models_app/services/connections.py",
        "current is not None and same_window and not any(name in fields for name in WINDOW_VALUES)",
        "current is not None and same_window",
        (
            "tests/models_app/test_learned_limits.py::test_a_person_overrides_a_learned_window_by_editing_the_window",
        ),
    ),
    Mutant(
        "runs use the smaller of the frozen and the learned window, never a larger one",
        "learned_window_above_frozen",
        f"{_ENGINE}/_budget.py",
        "        if window >= self.context_window:",
        "        if window == self.context_window:",
        (
            "tests/sessions_app/test_learned_runs.py::test_a_learned_window_never_raises_a_frozen_budget",
            "tests/engine/test_budget.py::test_a_smaller_window_keeps_the_reservations_shares_of_it",
        ),
    ),
    Mutant(
        "the reasoning rule is frozen at publish",
        "reasoning_not_frozen",
        "context_app/services/agents.py",
        '"reasoning": reasoning_rule(connection),',
        '"reasoning": None,',
        (
            "tests/sessions_app/test_learned_runs.py::test_the_reasoning_rule_is_frozen_at_publish_and_given_to_the_gateway",
        ),
    ),
    Mutant(
        "every gateway gets the version's reasoning rule",
        "reasoning_not_passed",
        "context_app/engine_adapter.py",
        'options: dict[str, Any] = {"reasoning": reasoning}',
        "options: dict[str, Any] = {}",
        (
            "tests/sessions_app/test_learned_runs.py::test_the_reasoning_rule_is_frozen_at_publish_and_given_to_the_gateway",
        ),
    ),
    Mutant(
        "runs of a server version count with the server's tokenizer",
        "server_counter_detached",
        "context_app/engine_adapter.py",
        "        snapshot, counter=server_counter(snapshot, connection), connection=connection",
        "        snapshot, counter=None, connection=connection",
        (
            "tests/sessions_app/test_self_hosted_sessions.py::test_a_server_counted_run_records_its_counts_and_replays_without_the_server",
        ),
    ),
    Mutant(
        "each model call keeps the counts its hard check used",
        "counts_not_recorded",
        "sessions_app/services/execution.py",
        'counts=getattr(call, "counts", None),',
        "counts=None,",
        (
            "tests/sessions_app/test_self_hosted_sessions.py::test_a_server_counted_run_records_its_counts_and_replays_without_the_server",
        ),
    ),
    Mutant(
        "the room for a question is counted in the hard check's unit",
        "room_in_bytes",
        "context_app/services/agents.py",
        "        counter = server_counter(snapshot, connection)\n",
        "        counter = None\n",
        (
            "tests/sessions_app/test_small_windows.py::"
            "test_the_demo_tools_publish_at_4096_tokens_on_a_tokenizing_server",
        ),
    ),
    Mutant(
        "the door and the pages measure with the counts the server made at publish",
        "publish_counts_forgotten",
        "context_app/engine_adapter.py",
        'remember((snapshot.get("server_tokenizer") or {}).get("counts"))',
        "remember(None)",
        (
            "tests/sessions_app/test_small_windows.py::"
            "test_the_demo_tools_publish_at_4096_tokens_on_a_tokenizing_server",
        ),
    ),
    Mutant(
        "a call without usage says so, never zero",
        "no_usage_hidden",
        "sessions_app/console/presenters.py",
        '"usage": call.NO_USAGE if unreported else usage_text(call.usage),',
        '"usage": usage_text(call.usage),',
        (
            "tests/sessions_app/test_usage_unreported.py::"
            "test_a_call_without_usage_is_shown_as_no_usage_reported",
        ),
    ),
    Mutant(
        "a replay learns the window its run learned, from the same recorded refusal",
        "replay_forgets_window",
        "sessions_app/services/replay.py",
        "                    setattr(error, name, value)",
        "                    pass",
        (
            "tests/sessions_app/test_self_hosted_sessions.py::test_an_overflow_is_learned_recorded_and_the_next_question_answers",
        ),
    ),
    Mutant(
        "a replay starts from the budget its run started with",
        "replay_starts_learned",
        "context_app/engine_adapter.py",
        "version.snapshot, start, learned=start is None",
        "version.snapshot, start, learned=True",
        (
            "tests/sessions_app/test_self_hosted_sessions.py::test_an_overflow_is_learned_recorded_and_the_next_question_answers",
        ),
    ),
    # --- the self-hosted server double copies the real servers ---------------------------------
    Mutant(
        "self-hosted double: a streamed overflow is a 200 with an empty body",
        "double_stream_overflow_refused",
        "tests/support/llama_double.py",
        """            if streamed:
                return _RawStream(200, events=[], raw=b"")
            completion = limit or 0""",
        """            if False:
                return _RawStream(200, events=[], raw=b"")
            completion = limit or 0""",
        (
            "tests/providers/test_llama_double.py::test_a_streamed_overflow_is_a_200_event_stream_with_an_empty_body",
        ),
    ),
    Mutant(
        "self-hosted double: no usage in streams, even when asked",
        "double_stream_usage",
        "tests/support/llama_double.py",
        "if not (self.stream_usage and include_usage):",
        "if not include_usage:",
        (
            "tests/providers/test_llama_double.py::test_a_streamed_reply_carries_no_usage_even_when_asked",
        ),
    ),
    Mutant(
        "self-hosted double: refused at prompt >= n_ctx, never on the output limit",
        "double_refuses_on_output",
        "tests/support/llama_double.py",
        "        return count >= self.n_ctx",
        "        return count + (limit or 0) > self.n_ctx",
        (
            "tests/providers/test_llama_double.py::test_a_prompt_of_the_window_or_more_is_refused_with_llama_cpp_pythons_words",
        ),
    ),
    # --- the door measures in the hard check's unit; old versions start from learned rules -----
    Mutant(
        "the door counts a server version's question with the server's tokenizer",
        "door_counts_with_server",
        "context_app/engine_adapter.py",
        "    counter = _door_counter(snapshot) if text else None",
        "    counter = None",
        (
            "tests/sessions_app/test_small_windows.py::test_the_door_counts_a_question_with_the_servers_tokenizer",
        ),
    ),
    Mutant(
        "the door's refusal says when the tokenizer did not answer (bytes)",
        "door_names_bytes_fallback",
        "context_app/engine_adapter.py",
        '        if self.fallback is None:\n            return ""',
        '        if True:\n            return ""',
        (
            "tests/sessions_app/test_small_windows.py::test_the_door_measures_in_bytes_when_the_tokenizer_fails_and_says_so",
        ),
    ),
    Mutant(
        "the door's refusal names its estimate and limit in the unit used",
        "door_names_its_unit",
        "context_app/engine_adapter.py",
        "return DoorCheck(check.size, check.limit, measure_unit(snapshot), size_fallback)",
        'return DoorCheck(check.size, check.limit, "", size_fallback)',
        (
            "tests/sessions_app/test_small_windows.py::test_the_door_measures_in_bytes_when_the_tokenizer_fails_and_says_so",
            "tests/sessions_app/test_oversized_input.py::test_a_huge_question_is_refused_naming_its_estimate_and_the_limit",
        ),
    ),
    Mutant(
        "a version that froze no reasoning rule starts its runs from the connection's learned one",
        "reasoning_learned_for_old_versions",
        "context_app/engine_adapter.py",
        "        reasoning = connection.learned_reasoning or None",
        "        reasoning = None",
        (
            "tests/sessions_app/test_real_servers.py::test_a_version_published_before_the_rule_was_learned_is_refused_once_not_every_run",
            "tests/sessions_app/test_learned_runs.py::test_the_reasoning_rule_is_frozen_at_publish_and_given_to_the_gateway",
        ),
    ),
    Mutant(
        "DeepSeek's official endpoint keeps its own reasoning rule",
        "reasoning_deepseek_keeps_its_rule",
        "context_app/engine_adapter.py",
        "    if reasoning is None and connection.provider != ModelConnection.Provider.DEEPSEEK:",
        "    if reasoning is None:",
        ("tests/sessions_app/test_learned_runs.py::test_deepseek_keeps_its_own_rule_unless_set",),
    ),
    # --- the run's writes (statements per run) ---------------------------------------------------
    Mutant(
        "a run's writes return its cancel flag (no separate cancel query)",
        "cancel_in_the_renewal",
        "sessions_app/services/journal.py",
        "        cancel_requested=bool(cancel), supplements_added=added,",
        "        cancel_requested=False, supplements_added=added,",
        (
            "tests/sessions_app/test_run_statements.py::test_a_save_returns_a_cancel_request",
            "tests/sessions_app/test_run_statements.py::test_the_heartbeat_hands_a_cancel_request_to_its_run",
            "tests/sessions_app/test_run_control.py::test_a_cancel_during_a_model_call_runs_none_of_its_tools",
        ),
    ),
    Mutant(
        "the renewal after a model call reads the cancel flag for the check after the answer",
        "cancel_read_after_a_model_call",
        "sessions_app/services/execution.py",
        "        writer.renew(close_queue_upto=read_upto if _ends_the_run(call, verifies) "
        "else None)\n",
        "",
        (
            "tests/sessions_app/test_run_control.py::test_cancelling_is_observable_while_the_run_finishes_its_step",
        ),
    ),
    Mutant(
        "a run reads its supplement queue when the count its writes return grew",
        "supplements_read_when_queued",
        "sessions_app/services/execution.py",
        "        if added is not None and added <= read_upto:",
        "        if True:",
        (
            "tests/sessions_app/test_run_statements.py::test_a_supplement_sent_during_a_model_call_enters_the_run",
            "tests/sessions_app/test_run_statements.py::test_a_supplement_queued_before_the_run_starts_is_taken",
        ),
    ),
    Mutant(
        "a run older than the supplement count reads its queue at every safe point",
        "supplements_unknown_count_read",
        "sessions_app/services/execution.py",
        "        if added is not None and added <= read_upto:",
        "        if (added or 0) <= read_upto:",
        (
            "tests/sessions_app/test_run_statements.py::test_a_run_older_than_the_supplement_count_still_reads_its_queue",
        ),
    ),
    Mutant(
        "a model call whose save never commits is still recorded (discarded)",
        "unsaved_calls_recorded",
        "sessions_app/services/execution.py",
        '        log.warning("run %s: lease lost, stopping without further writes", run_id)\n'
        "        with database_slots.held():\n"
        "            writer.record_unsaved_calls()\n",
        '        log.warning("run %s: lease lost, stopping without further writes", run_id)\n',
        (
            "tests/sessions_app/test_run_statements.py::test_a_call_whose_save_fails_is_recorded_whole_and_discarded",
            "tests/sessions_app/test_run_control.py::test_an_answer_that_arrives_after_the_lease_was_lost_is_recorded_discarded",
        ),
    ),
    Mutant(
        "a run reads its model connection once",
        "connection_read_once",
        "sessions_app/services/execution.py",
        "    connection = version_connection(version)",
        "    connection = False",
        (
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "a run's connection is read with the run, in its one SELECT",
        "connection_read_with_the_run",
        "sessions_app/services/execution.py",
        '        "session__agent_version__model_connection",',
        '        "session__agent_version",',
        (
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "a run's connection is the one its snapshot names, whatever the version's key holds",
        "connection_named_by_the_key",
        "context_app/engine_adapter.py",
        "        and connection_id == version.model_connection_id\n",
        "",
        (
            "tests/sessions_app/test_run_statements.py::test_a_run_reads_the_connection_its_snapshot_names",
        ),
    ),
    Mutant(
        "the renewal after the answer that ends the run closes its supplement queue",
        "queue_closed_apart",
        "sessions_app/services/execution.py",
        "            if not final or writer.signals.supplements_closed:",
        "            if not final:",
        (
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "the queue is closed in the renewal only when no supplement came after the count read",
        "queue_closed_unfenced",
        "sessions_app/services/journal.py",
        "{quote('supplements_added')} <= %s ",
        "{quote('supplements_added')} >= %s ",
        (
            "tests/sessions_app/test_run_statements.py::test_a_supplement_sent_during_the_final_call_is_answered_and_the_queue_stays_open",
            "tests/sessions_app/test_run_statements.py::test_the_renewal_closes_the_queue_only_when_nothing_came_after_the_count_and_no_cancel",
        ),
    ),
    Mutant(
        "the renewal leaves the queue of a run asked to cancel open",
        "queue_closed_on_cancel",
        "sessions_app/services/journal.py",
        "f\"AND NOT {quote('cancel_requested')} THEN",
        'f"THEN',
        (
            "tests/sessions_app/test_run_statements.py::test_the_renewal_closes_the_queue_only_when_nothing_came_after_the_count_and_no_cancel",
        ),
    ),
    Mutant(
        "only an unverified final answer of the main instance closes the queue at once",
        "queue_closed_before_verification",
        "sessions_app/services/execution.py",
        "    if verifies or call.error or call.purpose != ModelCall.Purpose.ACTION:",
        "    if call.error or call.purpose != ModelCall.Purpose.ACTION:",
        (
            "tests/sessions_app/test_run_statements.py::test_only_the_main_instances_unverified_answer_closes_the_queue",
        ),
    ),
    Mutant(
        "a question asked before anything was journaled reads no view",
        "first_run_reads_views",
        "sessions_app/selectors/views.py",
        "    if as_of is not None and as_of.inherited_watermark < 1:",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_a_history_load_reads_only_what_can_hold_its_records",
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "a session without views is answered by one query (its best candidate)",
        "viewless_session_reads_views_twice",
        "sessions_app/selectors/views.py",
        "    if chosen is None:\n        return None\n",
        "",
        (
            "tests/sessions_app/test_history.py::test_a_history_load_reads_only_what_can_hold_its_records",
        ),
    ),
    Mutant(
        "a question asked before anything was journaled reads no projection point",
        "first_run_reads_points",
        "sessions_app/selectors/history.py",
        "    if up_to is not None and up_to < 1:",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_a_history_load_reads_only_what_can_hold_its_records",
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "an empty range of records is not read",
        "empty_range_read",
        "sessions_app/selectors/history.py",
        "    if up_to is not None and up_to <= watermark:",
        "    if False:",
        (
            "tests/sessions_app/test_history.py::test_a_history_load_reads_only_what_can_hold_its_records",
            "tests/sessions_app/test_run_statements.py::test_a_two_call_run_makes_at_most_25_statements",
        ),
    ),
    Mutant(
        "a run's write is fenced by its lease owner and status",
        "run_write_unfenced",
        "sessions_app/services/journal.py",
        "    if owner is not None:\n        fence = ",
        "    if False:\n        fence = ",
        (
            "tests/sessions_app/test_run_statements.py::test_a_run_write_stores_each_value_as_its_field_does",
            "tests/sessions_app/test_run_control.py::test_the_heartbeat_renews_only_its_own_lease_and_writes_only_the_expiry",
        ),
    ),
    Mutant(
        "a run's write stores each value as its field does (encrypted, JSON, dates)",
        "run_write_unprepared",
        "sessions_app/services/journal.py",
        "        params.append(prepared)",
        "        params.append(value)",
        (
            "tests/sessions_app/test_run_statements.py::test_a_run_write_stores_each_value_as_its_field_does",
        ),
    ),
    Mutant(
        "a run's write takes values, not expressions",
        "run_write_expression",
        "sessions_app/services/journal.py",
        '            raise TypeError(f"{name}: a run\'s write takes values, not expressions")',
        "            pass",
        (
            "tests/sessions_app/test_run_statements.py::test_a_run_write_stores_each_value_as_its_field_does",
        ),
    ),
    Mutant(
        "rows inserted without a queryset ignore a conflict only when asked",
        "rows_conflicts_not_ignored",
        "sessions_app/services/rows.py",
        "    on_conflict = OnConflict.IGNORE if ignore_conflicts else None",
        "    on_conflict = OnConflict.IGNORE",
        ("tests/sessions_app/test_rows.py::test_a_conflict_is_ignored_only_when_asked",),
    ),
    Mutant(
        "rows inserted without a queryset store each value as its field does",
        "rows_unprepared",
        "sessions_app/services/rows.py",
        "                    value = field.get_db_prep_save(field.pre_save(obj, True), connection)",
        "                    value = field.pre_save(obj, True)",
        ("tests/sessions_app/test_rows.py::test_rows_are_stored_as_their_fields_store_them",),
    ),
    Mutant(
        "a model call's journaled answer is referred to, not copied",
        "answer_referred_to",
        "sessions_app/services/journal.py",
        "                    row.response_seq, row.response = journaled.pop(0).seq, rest",
        "                    journaled.pop(0)",
        (
            "tests/sessions_app/test_run_statements.py::test_an_answer_the_journal_holds_is_referred_to_not_copied",
        ),
    ),
    Mutant(
        "an answer whose journal record was altered does not pass for the call's answer",
        "answer_reference_digest",
        "sessions_app/selectors/runs.py",
        "    if digest is not None and digest != _digest(journaled):",
        "    if False:",
        (
            "tests/sessions_app/test_deepseek_sessions.py::test_two_tool_turns_and_a_plain_question_succeed_end_to_end",
        ),
    ),
    Mutant(
        "a byte length measured by one run's estimator serves the next run's",
        "byte_sizes_per_estimator",
        "agentloom/engine/_budget.py",
        "            self._messages = self._tools = JSON_BYTES",
        "            self._messages = self._tools = SizeCache(content_keys=False)",
        (
            "tests/engine/test_estimators.py::test_a_new_byte_estimator_measures_again_only_what_no_estimator_measured",
        ),
    ),
    Mutant(
        "a projection point is used only under its own binding",
        "point_any_binding",
        "sessions_app/selectors/history.py",
        "rows = PointRow.objects.filter(session=session, binding_key=key, view=view)",
        "rows = PointRow.objects.filter(session=session, view=view)",
        (
            "tests/sessions_app/test_projection_points.py::test_a_point_is_used_only_under_its_own_binding",
        ),
    ),
    Mutant(
        "a projection point extends exactly the view the reusable-view rule chooses",
        "point_any_view",
        "sessions_app/selectors/history.py",
        "rows = PointRow.objects.filter(session=session, binding_key=key, view=view)",
        "rows = PointRow.objects.filter(session=session, binding_key=key)",
        (
            "tests/sessions_app/test_projection_points.py::test_a_point_is_never_chosen_over_the_view_the_rule_chooses",
            "tests/sessions_app/test_projection_points.py::test_a_revoked_view_takes_its_points_out_of_use",
        ),
    ),
    Mutant(
        "a projection point is used within as_of's watermark only",
        "point_beyond_as_of",
        "sessions_app/selectors/history.py",
        "        rows = rows.filter(watermark__lte=up_to)\n",
        "        rows = rows\n",
        ("tests/sessions_app/test_projection_points.py::test_a_point_within_as_of_only",),
    ),
    Mutant(
        "decrypted points are served only under the keys they were read with",
        "point_cache_any_keys",
        "sessions_app/selectors/history.py",
        "return (pk, watermark, keyring_id())",
        'return (pk, watermark, "")',
        (
            "tests/sessions_app/test_projection_points.py::test_decrypted_points_are_served_only_under_the_keys_they_were_read_with",
        ),
    ),
    Mutant(
        "a session's purge removes its projection points",
        "point_outlives_session",
        "sessions_app/models.py",
        'Session, on_delete=models.CASCADE, related_name="projection_points", db_index=False',
        'Session, on_delete=models.DO_NOTHING, related_name="projection_points", db_index=False',
        (
            "tests/sessions_app/test_projection_points.py::test_purging_a_session_removes_its_points",
        ),
    ),
    Mutant(
        "a projection point keeps the calls a late result names",
        "point_forgets_calls",
        "agentloom/engine/_projection.py",
        "        self.calls = dict(point.calls)\n",
        "        self.calls = {}\n",
        (
            "tests/engine/test_projection_points.py::test_a_late_result_names_its_call_from_before_a_point",
        ),
    ),
    Mutant(
        "a projection point keeps the run states the next state joins",
        "point_forgets_states",
        "agentloom/engine/_projection.py",
        "        self.states = list(point.states)\n",
        "        self.states = []\n",
        (
            "tests/engine/test_projection_points.py::test_run_states_in_a_row_are_joined_across_a_point",
            "tests/engine/test_projection_points.py::test_run_states_waiting_for_an_open_group_are_joined_across_a_point",
        ),
    ),
    Mutant(
        "a projection point keeps the engine call ids already shown",
        "point_forgets_shown_ids",
        "agentloom/engine/_projection.py",
        "        self.shown_ids = set(point.shown_ids)\n",
        "        self.shown_ids = set()\n",
        (
            "tests/engine/test_projection_points.py::test_engine_call_ids_shown_before_a_point_are_not_shown_twice",
        ),
    ),
    Mutant(
        "a projection point keeps the open group and the notes waiting for it",
        "point_forgets_waiting_notes",
        "agentloom/engine/_projection.py",
        "        self.deferred = self.remasked(deferred)\n",
        "        self.deferred = []\n",
        (
            "tests/engine/test_projection_points.py::test_a_point_keeps_the_open_group_and_the_note_waiting_for_it",
        ),
    ),
    Mutant(
        "a new run's history resumes from the projection point",
        "point_never_saved",
        "sessions_app/services/projection_points.py",
        "    if point is None or point.watermark - loaded.resumed_at < POINT_STRIDE:",
        "    if True:",
        (
            "tests/sessions_app/test_projection_points.py::test_a_new_run_resumes_from_the_point_and_inherits_what_the_journal_projects",
        ),
    ),
    Mutant(
        "a resumed run compacts with the compaction version its checkpoint names",
        "resume_ignores_compaction_version",
        f"{_ENGINE}/_engine.py",
        "            compaction=compaction_of(frame.binding),\n",
        "            compaction=None,\n",
        (
            "tests/engine/test_compaction_versions.py::test_a_resumed_checkpoint_keeps_the_version_it_was_made_with",
        ),
    ),
    Mutant(
        "a checkpoint's snapshot is stored where its pointer points",
        "snapshot_pointer_lost",
        "sessions_app/services/journal.py",
        "                snapshots_store(self.run_id, self.session_id, fresh)\n",
        "",
        (
            "tests/sessions_app/test_compaction_snapshots.py::test_a_checkpoint_points_to_its_snapshots_stored_once",
        ),
    ),
    Mutant(
        "a pointer to a missing snapshot is an error, not an empty snapshot",
        "snapshot_missing_read_empty",
        "sessions_app/selectors/checkpoints.py",
        "                if key not in stored:\n",
        "                if False:\n",
        (
            "tests/sessions_app/test_compaction_snapshots.py::test_a_pointer_to_a_missing_snapshot_is_an_error",
        ),
    ),
    Mutant(
        "a snapshot a view refers to is not deleted alone",
        "shared_snapshot_deleted",
        "sessions_app/models.py",
        '        on_delete=models.RESTRICT,\n        related_name="views",',
        '        on_delete=models.CASCADE,\n        related_name="views",',
        (
            "tests/sessions_app/test_compaction_snapshots.py::test_a_snapshot_a_view_refers_to_is_kept_until_its_session_goes",
        ),
    ),
    Mutant(
        "a projection point carries the plan decided before it",
        "point_forgets_plan",
        "agentloom/engine/_projection.py",
        " = point.plan, point.plan_text, point.plan_known\n",
        " = None, None, False\n",
        (
            "tests/engine/test_projection_points.py::test_a_point_carries_the_plan_set_before_it_by_reference",
            "tests/sessions_app/test_projection_points.py::test_a_load_from_a_point_under_update_plan_reads_only_the_records_after_it",
        ),
    ),
    Mutant(
        "a plan result answered again without a plan leaves the plan to the records",
        "point_plan_never_superseded",
        "agentloom/engine/_projection.py",
        "        elif self.plan is not None and self.plan[1:] == key:",
        "        elif False:",
        (
            "tests/engine/test_projection_points.py::test_a_plan_result_answered_again_without_a_plan_leaves_the_plan_to_the_records",
        ),
    ),
    Mutant(
        "a projection point follows the update_plan calls it shows",
        "point_forgets_plan_calls",
        "agentloom/engine/_projection.py",
        "        self.plan_calls = set(point.plan_calls)\n",
        "        self.plan_calls = set()\n",
        (
            "tests/engine/test_projection_points.py::test_a_point_stored_before_it_carried_the_plan_still_reads",
        ),
    ),
    Mutant(
        "the spend record counts the calls of every save, the run's ending included",
        "usage_skips_the_ending_save",
        "sessions_app/services/journal.py",
        "        if not self.calls and not ending:\n",
        "        if not self.calls or ending:\n",
        (
            "tests/sessions_app/test_usage.py::test_the_record_equals_the_calls_sums_and_survives_a_purge",
        ),
    ),
    Mutant(
        "the spend record's day is the space's",
        "usage_day_in_utc",
        "sessions_app/services/usage.py",
        "        return (now or timezone.now()).astimezone(zone).date()",
        "        return (now or timezone.now()).astimezone(datetime.UTC).date()",
        ("tests/sessions_app/test_usage.py::test_the_day_follows_the_space_zone",),
    ),
    Mutant(
        "the spend record counts cached input tokens",
        "usage_forgets_cached_tokens",
        "sessions_app/services/usage.py",
        "        self.cached_tokens += call.cached_tokens or 0\n",
        "        self.cached_tokens += 0\n",
        (
            "tests/sessions_app/test_usage.py::test_the_record_equals_the_calls_sums_and_survives_a_purge",
        ),
    ),
    Mutant(
        "/metrics answers only the bearer of its token",
        "metrics_without_token",
        "sessions_app/metrics.py",
        '    if scheme.lower() != "bearer" or not hmac.compare_digest(',
        "    if False and hmac.compare_digest(",
        ("tests/sessions_app/test_metrics.py::test_metrics_refuse_a_scrape_without_the_token",),
    ),
    Mutant(
        "a metric label is bounded: a name outside the allowed ones is other",
        "metrics_label_unbounded",
        "agentloom/metrics.py",
        "    if allowed is not None and text not in allowed:",
        "    if False:",
        ("tests/sessions_app/test_metrics.py::test_a_tool_outside_the_version_is_other",),
    ),
    Mutant(
        "no message content in a span unless its capture is asked for",
        "trace_content_always",
        "sessions_app/services/execution.py",
        '    if capture and response.get("message"):',
        '    if response.get("message"):',
        ("tests/sessions_app/test_tracing.py::test_no_content_reaches_a_span_unless_asked",),
    ),
    Mutant(
        "a run past a spend limit is refused",
        "spend_limit_ignored",
        "sessions_app/services/usage.py",
        "        if spent > 0 and spent >= limit.amount:\n            raise",
        "        if False:\n            raise",
        (
            "tests/sessions_app/test_usage.py::test_a_spend_limit_refuses_a_run_past_it_and_warns_near_it",
        ),
    ),
    Mutant(
        "read_resource reads only a URI the same server named or lists",
        "resource_uri_from_text_accepted",
        "agentloom/toolservers/_resources.py",
        "        if uri not in source.offered():\n",
        "        if False:\n",
        (
            "tests/sessions_app/test_tool_server_resources.py::test_a_uri_never_offered_is_refused_without_a_request[2026]",
        ),
    ),
    Mutant(
        "a URI another server's result named is not offered",
        "resource_uri_from_another_server_accepted",
        "sessions_app/selectors/resources.py",
        '        if called.get(str(message.get("tool_call_id"))) not in tool_names:\n',
        "        if False:\n",
        (
            "tests/sessions_app/test_tool_server_resources.py::test_a_uri_another_server_named_is_refused_without_a_request[2026]",
        ),
    ),
    Mutant(
        "a call that sees the server's tools changed marks the listing stale",
        "listing_never_marked_stale",
        "models_app/services/tool_servers.py",
        "    if not (notified or (listed and _listing_differs(server.tools or [], listed))):\n",
        "    if True:\n",
        (
            "tests/sessions_app/test_tool_server_resources.py::test_a_changed_list_marks_the_listing_stale_and_frozen_tools_keep_working[2026]",
        ),
    ),
    Mutant(
        "notifications/tools/list_changed marks the listing stale at once",
        "list_changed_notification_ignored",
        "agentloom/toolservers/_client.py",
        "            self.tools_changed = True\n",
        "            self.tools_changed = False\n",
        (
            "tests/sessions_app/test_tool_server_resources.py::test_a_changed_list_marks_the_listing_stale_and_frozen_tools_keep_working[2025]",
        ),
    ),
    Mutant(
        "only the creator exports a session",
        "export_by_anyone",
        "sessions_app/services/export.py",
        "    if session.created_by_id != user.pk or session.deleted_at is not None:",
        "    if session.deleted_at is not None:",
        ("tests/sessions_app/test_export.py::test_only_the_creator_exports",),
    ),
    Mutant(
        "an export's signature covers every line",
        "export_signature_skips_records",
        "sessions_app/services/export.py",
        "        signer.update(line)\n        yield line",
        "        if item['type'] != 'record':\n            signer.update(line)\n        yield line",
        (
            "tests/sessions_app/test_export.py::test_the_creator_exports_every_record_in_order_signed",
        ),
    ),
    Mutant(
        "a fork copies no record past its seq",
        "fork_copies_past_the_seq",
        "sessions_app/services/fork.py",
        "        session=session, instance=MAIN_INSTANCE, seq__lte=seq",
        "        session=session, instance=MAIN_INSTANCE",
        ("tests/sessions_app/test_fork.py::test_the_forks_first_run_sees_exactly_the_prefix",),
    ),
    Mutant(
        "an import refuses a file its signature does not cover",
        "import_accepts_an_altered_file",
        "sessions_app/services/imports.py",
        '    if item.get("lines") != signer.lines or not signer.verifies(item.get("hmac", "")):',
        '    if item.get("lines") != signer.lines:',
        ("tests/sessions_app/test_import.py::test_altered_files_are_refused_whole_with_the_line",),
    ),
    Mutant(
        "retention spares a session under legal hold",
        "retention_ignores_legal_hold",
        "sessions_app/services/retention.py",
        "        .filter(space=space, legal_hold=False)",
        "        .filter(space=space)",
        ("tests/sessions_app/test_retention.py::test_retention_dry_run_then_real_run",),
    ),
    Mutant(
        "OpenAI calls carry the session's prompt_cache_key",
        "no_prompt_cache_key",
        "agentloom/providers/chat.py",
        '            body["prompt_cache_key"] = request.cache_key\n',
        "            pass\n",
        (
            "tests/providers/test_chat.py::test_openai_sends_the_sessions_cache_key_as_prompt_cache_key",
        ),
    ),
    Mutant(
        "every model call of a run carries the engine's cache key",
        "engine_drops_cache_key",
        f"{_ENGINE}/_engine.py",
        "            request = replace(request, cache_key=self.engine.config.cache_key)\n",
        "            pass\n",
        ("tests/engine/test_gateways.py::test_every_model_call_carries_the_engines_cache_key",),
    ),
    Mutant(
        "an identifier keeps its unit (numbers with units are kept whole)",
        "identifier_drops_unit",
        f"{_ENGINE}/_identifiers.py",
        "for part in (_QUOTED, _URL, _UUID, _PATH, _MONEY, _UNIT, _VERSION, _HEX, _CODE, _ID)",
        "for part in (_QUOTED, _URL, _UUID, _PATH, _MONEY, _VERSION, _HEX, _CODE, _ID)",
        ("tests/engine/test_identifiers.py::test_identifiers_of_real_looking_text",),
    ),
    Mutant(
        "a history search matches Chinese text by character bigrams",
        "no_cjk_bigrams",
        f"{_ENGINE}/_identifiers.py",
        "            found[run[start : start + 2]] = None",
        "            pass",
        (
            "tests/engine/test_identifiers.py::test_terms_hold_words_identifiers_and_chinese_bigrams",
        ),
    ),
    Mutant(
        "the kept-verbatim section stays within its limit",
        "kept_verbatim_unbounded",
        f"{_ENGINE}/_identifiers.py",
        "        if used + 1 + len(line) > room:",
        "        if False:",
        (
            "tests/engine/test_identifiers.py::test_the_section_stays_within_its_limit_and_names_what_did_not_fit",
        ),
    ),
    Mutant(
        "identifiers the summary already holds are not added again",
        "kept_verbatim_repeats_kept",
        f"{_ENGINE}/_identifiers.py",
        "    missing = [item for item in found.items() if item[0] not in summary]",
        "    missing = list(found.items())",
        (
            "tests/engine/test_identifiers.py::test_a_summary_missing_identifiers_gets_them_with_context_and_reference",
        ),
    ),
    Mutant(
        "a summary gets the identifiers it lost appended, citing their records",
        "summary_keeps_no_identifiers",
        f"{_ENGINE}/_compaction.py",
        "        if reference is None:\n            return None\n        sources, carried,",
        "        if True:\n            return None\n        sources, carried,",
        (
            "tests/engine/test_kept_verbatim.py::test_identifiers_a_summary_lost_are_appended_with_references_that_resolve",
        ),
    ),
    Mutant(
        "the kept section is bounded by the summary's room, never failing a summary that fits",
        "kept_section_outgrows_the_room",
        f"{_ENGINE}/_compaction.py",
        "            if not section or fits(body + section + footer, self.room):",
        "            if True:",
        (
            "tests/engine/test_kept_verbatim.py::test_a_summary_that_fills_its_room_still_succeeds_without_the_section",
            "tests/engine/test_kept_verbatim.py::test_a_section_longer_in_tokens_than_in_characters_is_shrunk_to_its_room",
        ),
    ),
    Mutant(
        "an identifier kept once keeps its reference in the next summary",
        "earlier_kept_lines_forgotten",
        f"{_ENGINE}/_compaction.py",
        "                    carried.extend(kept)",
        "                    pass",
        (
            "tests/engine/test_kept_verbatim.py::test_an_identifier_kept_once_keeps_its_reference_through_the_next_compaction",
        ),
    ),
    Mutant(
        "the compactor cites the records a summary replaced",
        "summary_cites_nothing",
        f"{_ENGINE}/_compaction.py",
        '        footer = f"\\n\\n{SOURCES_HEADER}{cited(cited_refs)}" if cited_refs else ""',
        '        footer = ""',
        (
            "tests/engine/test_kept_verbatim.py::test_identifiers_a_summary_lost_are_appended_with_references_that_resolve",
        ),
    ),
    Mutant(
        "version 1 runs keep the prompt and summaries they had",
        "version_one_keeps_identifiers",
        f"{_ENGINE}/_context.py",
        "                reference=self._reference if self.compaction.kept_verbatim else None,",
        "                reference=self._reference,",
        (
            "tests/engine/test_kept_verbatim.py::test_the_summary_request_asks_for_sections_and_version_1_keeps_its_prompt",
        ),
    ),
    Mutant(
        "an import that stopped half-way is discarded whole once stale",
        "stopped_import_kept",
        "sessions_app/services/imports.py",
        "            if session is not None:\n                session.delete()",
        "            if session is not None:\n                pass",
        (
            "tests/sessions_app/test_import.py::test_an_import_that_stopped_half_way_is_discarded_once_stale",
        ),
    ),
    Mutant(
        "an import still writing is never discarded",
        "writing_import_discarded",
        "sessions_app/services/imports.py",
        "    cutoff = (now or timezone.now()) - STAGED_MAX_AGE",
        "    cutoff = (now or timezone.now()) + STAGED_MAX_AGE",
        (
            "tests/sessions_app/test_import.py::test_an_import_that_stopped_half_way_is_discarded_once_stale",
        ),
    ),
    Mutant(
        "the demo model neither copies nor answers from what the compactor appended",
        "demo_echoes_kept_lines",
        f"{_ENGINE}/_gateway.py",
        '    return kept.sub("", text)',
        "    return text",
        (
            "tests/engine/test_kept_verbatim.py::test_the_demo_model_reads_and_writes_only_its_own_summary_lines",
        ),
    ),
    Mutant(
        "a summary request on the conversation's prefix carries its tools",
        "prefix_request_drops_tools",
        f"{_ENGINE}/_compaction.py",
        "            reply = request.summarise(messages, self.room, True)",
        "            reply = request.summarise(messages, self.room)",
        (
            "tests/engine/test_prefix_summary.py::test_the_summary_request_extends_the_last_action_request",
        ),
    ),
    Mutant(
        "a summary request with tools forbids calling them",
        "prefix_request_may_call_tools",
        f"{_ENGINE}/_context.py",
        '            tool_choice="none" if purpose == "compaction" and tools else None,',
        "            tool_choice=None,",
        (
            "tests/engine/test_prefix_summary.py::test_the_summary_request_extends_the_last_action_request",
        ),
    ),
    Mutant(
        "a reply that calls a tool is not a summary",
        "tool_calling_summary_accepted",
        f"{_ENGINE}/_context.py",
        "            if tool_calls_of(reply):\n                raise EngineError",
        "            if False:\n                raise EngineError",
        (
            "tests/engine/test_prefix_summary.py::test_a_failed_or_tool_calling_prefix_call_falls_back_within_the_call_limit",
        ),
    ),
    Mutant(
        "a failed prefix request falls back to the segmented one while calls are left",
        "prefix_failure_ends_the_attempt",
        f"{_ENGINE}/_compaction.py",
        "        if failure is not None and left <= 0:",
        "        if failure is not None:",
        (
            "tests/engine/test_prefix_summary.py::test_a_failed_or_tool_calling_prefix_call_falls_back_within_the_call_limit",
        ),
    ),
    Mutant(
        "the segmented fallback spends only the calls the prefix request left",
        "fallback_ignores_the_call_limit",
        f"{_ENGINE}/_compaction.py",
        "        if failure is not None and left <= 0:",
        "        if False:",
        (
            "tests/engine/test_prefix_summary.py::test_a_failed_or_tool_calling_prefix_call_falls_back_within_the_call_limit",
        ),
    ),
    Mutant(
        "the demo model summarises only what the prefix request does not keep",
        "demo_summarises_the_kept_messages",
        f"{_ENGINE}/_gateway.py",
        "    above = above[: len(above) - int(kept.group(1))] if kept else above",
        "    above = above",
        (
            "tests/engine/test_prefix_summary.py::test_the_demo_model_summarises_the_conversation_above_the_kept_messages",
        ),
    ),
    Mutant(
        "a compaction row records what its own calls cost",
        "compaction_cost_unrecorded",
        f"{_ENGINE}/_context.py",
        "            add_usage(spent, response.usage)\n",
        "            pass\n",
        (
            "tests/engine/test_prefix_summary.py::test_a_compaction_row_records_what_its_calls_cost_and_the_steps_it_came_at",
        ),
    ),
    Mutant(
        "a compaction's saving ends where the next compaction takes over",
        "saving_counted_to_the_end",
        "sessions_app/selectors/context.py",
        "if position + 1 < len(applied) else now",
        "if False else now",
        (
            "tests/sessions_app/test_compaction_costs.py::test_each_saving_ends_where_the_next_compaction_takes_over",
        ),
    ),
    Mutant(
        "a run names the trace of its latest execution when tracing is on",
        "trace_id_forgotten",
        "sessions_app/services/execution.py",
        "                writer.carried.update(_trace_fields(span))",
        "                pass",
        (
            "tests/sessions_app/test_tracing.py::test_a_runs_pages_show_its_trace_id_when_tracing_is_on",
        ),
    ),
    Mutant(
        "a completion keeps the provider's id",
        "completion_id_dropped",
        "agentloom/providers/chat.py",
        "        id=response_id if isinstance(response_id, str) else None,",
        "        id=None,",
        (
            "tests/providers/test_chat.py::test_a_completion_keeps_its_id_and_reads_back_from_what_is_stored",
        ),
    ),
    Mutant(
        "the engine keeps the provider's completion id for the call's span",
        "engine_drops_completion_id",
        f"{_ENGINE}/_engine.py",
        "        response = replace(response, message=engine.redactor.value(response.message))",
        (
            "        response = replace(\n"
            "            response, message=engine.redactor.value(response.message), id=None\n"
            "        )"
        ),
        ("tests/sessions_app/test_tracing.py::test_a_chat_span_names_the_providers_completion_id",),
    ),
    Mutant(
        "only a space admin holds or releases a session",
        "legal_hold_by_a_member",
        "sessions_app/services/retention.py",
        "    if require_member(user, session.space_id) != Membership.Role.ADMIN:",
        "    if False:",
        (
            "tests/foundation/test_admin_scoping.py::test_a_space_admin_holds_and_releases_sessions_in_the_admin",
        ),
    ),
    Mutant(
        "a run carries the session's pinned instructions after its system prompt",
        "pins_not_carried",
        "sessions_app/services/execution.py",
        '"system_prompt": pinned_prompt(version.snapshot, run.pinned),',
        '"system_prompt": pinned_prompt(version.snapshot, ""),',
        (
            "tests/sessions_app/test_pinned.py::test_a_pinned_rule_is_in_every_view_word_for_word_after_20_compactions",
        ),
    ),
    Mutant(
        "a run keeps the pins it was asked with",
        "pins_read_when_the_run_starts",
        "sessions_app/services/runs.py",
        "                pinned=pinned,",
        '                pinned="",',
        ("tests/sessions_app/test_pinned.py::test_the_console_pins_from_the_chat_page",),
    ),
    Mutant(
        "pinned instructions count in the room for a question",
        "pins_outside_the_door",
        "context_app/engine_adapter.py",
        "        system_prompt=pinned_prompt(snapshot, pinned),",
        '        system_prompt=pinned_prompt(snapshot, ""),',
        (
            "tests/sessions_app/test_pinned.py::test_pins_count_in_the_room_for_a_question_and_too_many_are_refused",
        ),
    ),
    Mutant(
        "pins that leave less than the floor for a question are refused",
        "pins_never_refused",
        "sessions_app/services/runs.py",
        "    if text and not room.fits:",
        "    if False:",
        (
            "tests/sessions_app/test_pinned.py::test_pins_count_in_the_room_for_a_question_and_too_many_are_refused",
        ),
    ),
    Mutant(
        "a replay starts with the pins the run was asked with",
        "replay_without_pins",
        "sessions_app/services/replay.py",
        "pinned_prompt(run.session.agent_version.snapshot, run.pinned)",
        'pinned_prompt(run.session.agent_version.snapshot, "")',
        (
            "tests/sessions_app/test_pinned.py::test_a_pinned_rule_is_in_every_view_word_for_word_after_20_compactions",
        ),
    ),
    # --- search_history and the journal's keyed index ------------------------------------------
    Mutant(
        "an id with a code inside is one identifier, not a code and a tail",
        "codes_cut_ids",
        f"{_ENGINE}/_identifiers.py",
        'r"|[A-Z][A-Z0-9]*_[A-Z0-9_]+)\\b(?!-\\w)"',
        'r"|[A-Z][A-Z0-9]*_[A-Z0-9_]+)\\b"',
        ("tests/engine/test_identifiers.py::test_identifiers_of_real_looking_text",),
    ),
    Mutant(
        "a search never returns records past the instance's watermark",
        "search_past_the_watermark",
        f"{_ENGINE}/_context.py",
        "candidates += self.record_store.search(query, up_to=frame.inherited_watermark)",
        "candidates += self.record_store.search(query, up_to=10**12)",
        (
            "tests/engine/test_search_history.py::test_records_past_the_watermark_are_never_returned",
        ),
    ),
    Mutant(
        "the index's search honours the watermark",
        "index_ignores_the_watermark",
        "sessions_app/selectors/search.py",
        "        and (up_to is None or seq <= up_to)",
        "        and True",
        (
            "tests/sessions_app/test_search_index.py::test_the_latest_value_wins_and_records_past_the_watermark_stay_out",
            "tests/sessions_app/test_search_index.py::test_a_search_filters_the_records_of_a_block_one_by_one",
        ),
    ),
    Mutant(
        "a search passes over a text without a query term as a substring, case and sigma aside",
        "prefilter_case_sensitive",
        f"{_ENGINE}/_search.py",
        "        lowered = _span_form(hit.text)",
        "        lowered = hit.text",
        (
            "tests/engine/test_search_history.py::test_a_record_is_ranked_by_its_terms_whatever_its_case_and_sigmas",
        ),
    ),
    Mutant(
        "a term's final sigma matches the same span in its text",
        "one_sigma_dropped",
        f"{_ENGINE}/_search.py",
        '    return text.lower().replace("ς", "σ")',
        "    return text.lower()",
        (
            "tests/engine/test_search_history.py::test_a_record_is_ranked_by_its_terms_whatever_its_case_and_sigmas",
        ),
    ),
    Mutant(
        "blocks past the watermark are never read in place of the ones before it",
        "watermark_after_the_read",
        "sessions_app/selectors/search.py",
        "    if up_to is not None:\n        where",
        "    if False:\n        where",
        (
            "tests/sessions_app/test_search_index.py::test_a_search_filters_the_records_of_a_block_one_by_one",
        ),
    ),
    Mutant(
        "a search's kinds filter holds for each record of a block",
        "block_kinds_unfiltered",
        "sessions_app/selectors/search.py",
        "        and (not query.kinds or kind in query.kinds)",
        "        and True",
        (
            "tests/sessions_app/test_search_index.py::test_a_search_filters_the_records_of_a_block_one_by_one",
        ),
    ),
    Mutant(
        "a block of several kinds matches any kinds filter",
        "mixed_block_one_kind",
        "sessions_app/services/search_index.py",
        "kind=next(iter(self.kinds)) if len(self.kinds) == 1 else JournalTerms.MIXED_KINDS,",
        "kind=min(self.kinds),",
        (
            "tests/sessions_app/test_search_index.py::test_an_ended_run_is_one_block_holding_each_digest_once",
            "tests/sessions_app/test_search_index.py::test_a_search_filters_the_records_of_a_block_one_by_one",
        ),
    ),
    Mutant(
        "a block stands for one run and one side (main or sub-agents)",
        "block_spans_other_sides",
        "sessions_app/selectors/search.py",
        "    return in_range and run == run_number and main == (instance == MAIN_INSTANCE)",
        "    return in_range and run == run_number",
        ("tests/sessions_app/test_search_index.py::test_a_block_stands_for_one_side_of_its_run",),
    ),
    Mutant(
        "a run's saves extend its open index blocks",
        "writer_blocks_not_carried",
        "sessions_app/services/journal.py",
        "        self.index_blocks = index_blocks\n",
        "        pass\n",
        (
            "tests/sessions_app/test_search_index.py::test_an_ended_run_is_one_block_holding_each_digest_once",
            "tests/sessions_app/test_search_index.py::test_a_writer_fills_its_blocks_save_by_save_and_keeps_them_only_once_committed",
        ),
    ),
    Mutant(
        "a writer keeps its open blocks only once the save commits",
        "blocks_kept_before_commit",
        "sessions_app/services/journal.py",
        "            index_blocks = dict(self.index_blocks)",
        "            index_blocks = self.index_blocks",
        (
            "tests/sessions_app/test_search_index.py::test_a_writer_fills_its_blocks_save_by_save_and_keeps_them_only_once_committed",
        ),
    ),
    Mutant(
        "a block holds at most MAX_BLOCK_RECORDS records",
        "block_never_full",
        "sessions_app/services/search_index.py",
        "            or block.records >= JournalTerms.MAX_BLOCK_RECORDS\n",
        "",
        (
            "tests/sessions_app/test_search_index.py::test_a_writer_fills_its_blocks_save_by_save_and_keeps_them_only_once_committed",
        ),
    ),
    Mutant(
        "a block holds the digests of all its records",
        "block_holds_its_last_record_only",
        "sessions_app/services/search_index.py",
        "                digests=block.digests.union(digests),",
        "                digests=frozenset(digests),",
        (
            "tests/sessions_app/test_search_index.py::test_an_ended_run_is_one_block_holding_each_digest_once",
        ),
    ),
    Mutant(
        "index_journal merges the rows of one record that earlier versions left",
        "index_journal_leaves_singles",
        "sessions_app/services/search_index.py",
        "    _merge_singles(batch_size, report, on_batch)",
        "    pass",
        (
            "tests/sessions_app/test_search_index.py::test_index_journal_merges_rows_of_one_record_and_old_forms_still_match",
        ),
    ),
    Mutant(
        "SQLite's rows of hex text still match until rewritten",
        "hex_rows_unmatched",
        "sessions_app/selectors/search.py",
        "        [digest_blob([digest]), digest_text([digest])],",
        "        [digest_blob([digest]), digest_blob([digest])],",
        (
            "tests/sessions_app/test_search_index.py::test_index_journal_merges_rows_of_one_record_and_old_forms_still_match",
        ),
    ),
    Mutant(
        "a sub-agent searches only its own records",
        "sub_agent_searches_the_journal",
        f"{_ENGINE}/_context.py",
        "        if frame.instance == MAIN_INSTANCE and self.record_store is not None:",
        "        if self.record_store is not None:",
        ("tests/engine/test_search_history.py::test_a_sub_agent_searches_only_its_own_records",),
    ),
    Mutant(
        "among equal matches the latest record ranks first",
        "oldest_value_first",
        f"{_ENGINE}/_search.py",
        "(tier(hit), hit.whole, hit.order)",
        "(tier(hit), hit.whole, tuple(-part for part in hit.order))",
        (
            "tests/engine/test_search_history.py::test_the_latest_value_of_a_fact_stated_twice_ranks_first",
            "tests/sessions_app/test_search_index.py::test_the_latest_value_wins_and_records_past_the_watermark_stay_out",
        ),
    ),
    Mutant(
        "hits nearly as good as the best rank as its equals, the latest first",
        "no_near_best",
        f"{_ENGINE}/_search.py",
        "NEAR_BEST = 0.75",
        "NEAR_BEST = 1.0",
        (
            "tests/engine/test_search_history.py::test_an_update_worded_differently_still_ranks_first",
        ),
    ),
    Mutant(
        "a search never finds the call that made it",
        "search_finds_its_own_call",
        f"{_ENGINE}/_search.py",
        '        if function.get("name") == SEARCH_HISTORY:',
        "        if False:",
        (
            "tests/engine/test_search_history.py::test_a_run_finds_an_earlier_runs_fact_by_identifier_with_its_reference",
        ),
    ),
    Mutant(
        "a span that looks like a credential is never a search term",
        "keys_are_terms",
        f"{_ENGINE}/_identifiers.py",
        "    if len(span) >= 20 and _SECRET_PREFIX.match(span.lower()):",
        "    if span:\n        return False\n    if _SECRET_PREFIX.match(span.lower()):",
        (
            "tests/engine/test_search_history.py::test_chinese_text_is_found_by_its_words_and_a_pasted_key_is_not_confirmed",
        ),
    ),
    Mutant(
        "a search result is held to the large-record limit",
        "search_result_unbounded",
        f"{_ENGINE}/_search.py",
        "            if fits is None or fits(result):",
        "            if True:",
        (
            "tests/engine/test_search_history.py::test_the_result_stays_within_the_large_record_limit",
        ),
    ),
    Mutant(
        "the handoff text names search_history only where it is offered",
        "handoff_never_names_search",
        f"{_ENGINE}/_compaction.py",
        "footer += SEARCH_NOTE if request.searchable else READ_BACK_NOTE",
        "footer += READ_BACK_NOTE",
        (
            "tests/engine/test_search_history.py::test_the_handoff_text_names_search_history_only_where_it_is_offered",
        ),
    ),
    Mutant(
        "every journaled record is indexed in the same transaction",
        "records_not_indexed",
        "sessions_app/services/journal.py",
        "    index_records(rows, run_number=run_number, open_blocks=open_blocks)",
        "    pass",
        (
            "tests/sessions_app/test_search_index.py::test_every_searchable_record_is_indexed_as_it_is_journaled",
            "tests/sessions_app/test_search_index.py::test_a_run_searches_the_journal_and_its_replay_matches",
        ),
    ),
    Mutant(
        "a fork's records are indexed under the fork's key",
        "fork_not_indexed",
        "sessions_app/services/fork.py",
        "    index_records(batch)\n    fork.next_seq",
        "    fork.next_seq",
        ("tests/sessions_app/test_search_index.py::test_a_fork_is_indexed_under_its_own_key",),
    ),
    Mutant(
        "a search tries every configured key (rows of a fallback key still match)",
        "search_under_the_current_key_only",
        "sessions_app/selectors/search.py",
        "for key_id, key in encryption.search_keys(session_id):",
        "for key_id, key in encryption.search_keys(session_id)[:1]:",
        (
            "tests/sessions_app/test_search_index.py::test_key_rotation_keeps_search_working_during_and_after",
        ),
    ),
    Mutant(
        "key rotation rebuilds the index rows of the old key",
        "rotation_keeps_old_rows",
        "sessions_app/services/search_index.py",
        "    for batch in _rows_in_key_order(batch_size):\n        retired",
        "    return\n    for batch in _rows_in_key_order(batch_size):\n        retired",
        (
            "tests/sessions_app/test_search_index.py::test_key_rotation_keeps_search_working_during_and_after",
        ),
    ),
    Mutant(
        "the run's record store searches through the database slots",
        "slotted_store_drops_search",
        "sessions_app/services/execution.py",
        "    def search(self, *args, **kwargs):",
        "    def search_(self, *args, **kwargs):",
        (
            "tests/sessions_app/test_search_index.py::test_a_run_searches_the_journal_and_its_replay_matches",
        ),
    ),
    Mutant(
        "a queued task carries its request's trace context",
        "task_untraced",
        "agentloom/tracing.py",
        "    CeleryInstrumentor().instrument(tracer_provider=_PROVIDER)",
        "    CeleryInstrumentor().instrument(tracer_provider=None)",
        (
            "tests/sessions_app/test_tracing.py::test_a_trace_goes_from_the_request_through_the_task_to_the_engine",
        ),
    ),
    Mutant(
        "a tool call's span lasts while it runs, under the run's",
        "tool_unspanned",
        f"{_ENGINE}/_engine.py",
        '        with self.tool_span(call_id, name) as late:\n            waits, late["error"]',
        '        with unspanned("execute_tool", {}) as late:\n            waits, late["error"]',
        (
            "tests/engine/test_engine.py::test_the_span_hook_holds_each_operation_while_it_lasts",
            "tests/sessions_app/test_tracing.py::test_a_run_is_a_tree_of_agent_chat_and_tool_spans",
        ),
    ),
    Mutant(
        "a started worker process switches tracing on as Django starts in it",
        "worker_untraced",
        "sessions_app/apps.py",
        "        _start_tracing()\n",
        "",
        (
            "tests/sessions_app/test_worker.py::test_a_started_worker_process_sends_its_spans_to_the_collector",
        ),
    ),
    Mutant(
        "a tool call that never runs is a span saying why",
        "refused_call_unspanned",
        f"{_ENGINE}/_engine.py",
        "        with self.tool_span(call_id, name) as late:\n            if result is not None:",
        '        with unspanned("execute_tool", {}) as late:\n            if result is not None:',
        (
            "tests/engine/test_engine.py::test_a_call_that_never_runs_still_has_its_span_saying_why",
            "tests/sessions_app/test_tracing.py::test_a_call_that_never_ran_is_a_span_saying_why_without_its_content",
            "tests/sessions_app/test_approvals.py::test_a_denied_call_gets_a_denied_result_and_the_note",
        ),
    ),
    Mutant(
        "a call a resume answers unknown is a span of its own",
        "resume_unknown_unspanned",
        f"{_ENGINE}/_engine.py",
        '            self.refuse(call_id, name, "outcome_unknown", None)',
        "            pass",
        ("tests/engine/test_engine.py::test_a_call_that_never_runs_still_has_its_span_saying_why",),
    ),
    Mutant(
        "arguments its schema refuses: the call never runs, and its span says so",
        "invalid_arguments_as_tool_error",
        f"{_ENGINE}/_engine.py",
        '            self.refuse(call_id, name, "invalid_arguments", f"ERROR: {exc}")',
        '            self.refuse(call_id, name, "tool_error", f"ERROR: {exc}")',
        (
            "tests/engine/test_engine.py::test_a_call_that_never_runs_still_has_its_span_saying_why",
            "tests/sessions_app/test_tracing.py::test_a_call_that_never_ran_is_a_span_saying_why_without_its_content",
        ),
    ),
    Mutant(
        "a call a run waited on when it ended outside its engine is a span saying why",
        "waited_call_unspanned",
        "sessions_app/services/journal.py",
        '(item.get("tool"), item.get("call_id")) for item in run.pending_approvals or []]',
        '(item.get("tool"), item.get("call_id")) for item in []]',
        ("tests/sessions_app/test_approvals.py::test_cancel_while_waiting_ends_the_run_at_once",),
    ),
    Mutant(
        "a sub-agent's invoke_agent is a child of its delegation tool's span",
        "sub_agent_unspanned",
        f"{_ENGINE}/_engine.py",
        'with self.span("invoke_agent", ',
        'with unspanned("invoke_agent", ',
        (
            "tests/engine/test_engine.py::test_the_span_hook_holds_each_operation_while_it_lasts",
            "tests/sessions_app/test_tracing.py::test_a_sub_agents_invoke_agent_is_a_child_of_its_delegation_tool_span",
        ),
    ),
    Mutant(
        "a compaction's span lasts its work and holds its summary calls",
        "compaction_unspanned",
        f"{_ENGINE}/_context.py",
        '        with self.span("compaction", {"triggers": fired}) as late:',
        '        with unspanned("compaction", {"triggers": fired}) as late:',
        (
            "tests/sessions_app/test_tracing.py::test_a_compaction_span_lasts_its_work_and_holds_its_summary_call",
        ),
    ),
    Mutant(
        "a run that waited continues linked to the execution that stopped",
        "continuation_unlinked",
        "sessions_app/services/execution.py",
        "    links = ((run.trace_id, run.trace_span_id),) if waited else ()",
        "    links = ()",
        (
            "tests/sessions_app/test_approvals.py::test_a_run_that_waits_continues_in_a_trace_linked_to_the_one_that_stopped",
        ),
    ),
    Mutant(
        "a run ended outside its engine is counted in the metrics",
        "outside_ending_uncounted",
        "sessions_app/services/journal.py",
        "    _count_ending(run, ending, [])",
        "    pass",
        ("tests/sessions_app/test_metrics.py::test_runs_ended_outside_their_engine_are_counted",),
    ),
    Mutant(
        "a run ended outside its engine is among the spend record's outcomes",
        "outside_ending_unrecorded",
        "sessions_app/services/journal.py",
        "    usage_add(owner=UsageOwner.of_run(run), ended=status)",
        "    pass",
        ("tests/sessions_app/test_metrics.py::test_runs_ended_outside_their_engine_are_counted",),
    ),
    Mutant(
        "an exception ends a span with its class name, never its message",
        "span_error_message",
        "agentloom/tracing.py",
        "        _failed(span, type(error).__name__)",
        '        _failed(span, f"{type(error).__name__}: {error}")',
        (
            "tests/sessions_app/test_tracing.py::test_an_error_ends_a_span_with_its_kind_never_its_message",
        ),
    ),
    Mutant(
        "a run ended outside its engine is a span of what ended it",
        "outside_ending_untraced",
        "sessions_app/services/journal.py",
        "    if not tracing.configured():\n        return",
        "    if True:\n        return",
        (
            "tests/sessions_app/test_tracing.py::test_a_run_ended_outside_its_engine_is_a_span_of_what_ended_it",
        ),
    ),
    # --- the retention rule and legal holds over the API and in the console ---------------------
    Mutant(
        "setting the retention rule records who set it",
        "retention_setter_unrecorded",
        "agentloom/spaces/services/retention.py",
        "    space.retention_set_by = user\n",
        "    space.retention_set_by = space.retention_set_by\n",
        (
            "tests/api/test_retention.py::test_a_space_admin_sets_the_rule_and_who_and_when_are_recorded",
        ),
    ),
    Mutant(
        "only a space admin sets the retention rule",
        "retention_set_by_a_member",
        "agentloom/spaces/services/retention.py",
        "    if require_member(user, space.pk) != Membership.Role.ADMIN:",
        "    if False:",
        (
            "tests/console/test_retention_pages.py::test_a_member_cannot_set_the_rule_nor_preview_it",
        ),
    ),
    Mutant(
        "a rule is a whole number of days from 0 to 36,500",
        "retention_days_unchecked",
        "agentloom/spaces/services/retention.py",
        "    if isinstance(days, bool) or not isinstance(days, int)"
        " or not 0 <= days <= MAX_RETENTION_DAYS:",
        "    if not isinstance(days, int):",
        (
            "tests/console/test_retention_pages.py::test_a_rule_that_is_not_one_is_refused_with_a_message",
        ),
    ),
    Mutant(
        "the admin's page sets the rule through its service",
        "admin_rule_unset",
        "agentloom/spaces/admin.py",
        "                retention_set_nested(user=request.user, space=obj, days=days)",
        "                pass",
        (
            "tests/foundation/test_admin_scoping.py::test_the_retention_rule_set_in_the_admin_records_who_set_it",
        ),
    ),
    Mutant(
        "a dry run of the rule over the API saves nothing",
        "dry_run_saves",
        "sessions_app/api_retention.py",
        '        if data.validated_data["dry_run"]:',
        "        if False:",
        (
            "tests/api/test_retention.py::test_a_dry_run_counts_what_the_rule_would_remove_and_saves_nothing",
        ),
    ),
    Mutant(
        "the API's preview counts the proposed rule, not the one in force",
        "api_preview_counts_the_rule_in_force",
        "sessions_app/api_retention.py",
        "    would_remove = retention_due(space, days=days).count() if admin else None",
        "    would_remove = retention_due(space).count() if admin else None",
        (
            "tests/api/test_retention.py::test_a_dry_run_counts_what_the_rule_would_remove_and_saves_nothing",
        ),
    ),
    Mutant(
        "what a rule would remove is a space admin's to see",
        "would_remove_for_members",
        "sessions_app/api_retention.py",
        "    admin = space_role(user, space) == Membership.Role.ADMIN",
        "    admin = True",
        (
            "tests/api/test_retention.py::test_a_space_admin_sets_the_rule_and_who_and_when_are_recorded",
        ),
    ),
    Mutant(
        "the console's preview counts the proposed rule, not the one in force",
        "console_preview_counts_the_rule_in_force",
        "sessions_app/console/spaces.py",
        "            would_remove=retention_due(space, days=days).count()"
        " if days is not None else None,",
        "            would_remove=retention_due(space).count() if days is not None else None,",
        ("tests/console/test_retention_pages.py::test_an_admin_previews_a_rule_then_saves_it",),
    ),
    Mutant(
        "a session's hold outside the caller's reach is not found",
        "hold_reaches_every_member",
        "sessions_app/selectors/sessions.py",
        '''each service's to say."""\n'''
        "    session = sessions_in_reach(user).filter(pk=session_id).first()",
        '''each service's to say."""\n'''
        "    session = live_sessions()"
        ".filter(pk=session_id, space__memberships__user=user).first()",
        (
            "tests/api/test_retention.py::test_a_hold_outside_the_callers_reach_is_404_and_bad_input_400",
        ),
    ),
    Mutant(
        "each change of a legal hold is written into the session's history",
        "hold_unaudited",
        "sessions_app/services/retention.py",
        "        LogEntry.objects.create(",
        "        dict(",
        (
            "tests/api/test_retention.py::test_a_space_admin_holds_a_session_retention_spares_it_and_each_change_is_audited",
        ),
    ),
    # --- masking in batches, oldest first, kept for the runs after (compaction version 5) -------
    Mutant(
        "a masking frees at least its batch, or nothing is masked",
        "mask_below_batch",
        f"{_ENGINE}/_compaction.py",
        "        if self.before - self.measure(masked_view) < batch:",
        "        if False:",
        (_MASKING + "test_masking_never_fires_for_less_than_its_batch",),
    ),
    Mutant(
        "masking goes oldest first",
        "mask_newest_first",
        f"{_ENGINE}/_compaction.py",
        "        for unit in self.units[:reach]:",
        "        for unit in reversed(self.units[:reach]):",
        (_MASKING + "test_masking_goes_oldest_first_and_stops_at_the_target",),
    ),
    Mutant(
        "masking stops once the view is at the target and the batch is freed",
        "mask_past_the_target",
        f"{_ENGINE}/_compaction.py",
        "        goal = max(self.before - self.target_at, batch)",
        "        goal = max(self.before, batch)",
        (_MASKING + "test_masking_goes_oldest_first_and_stops_at_the_target",),
    ),
    Mutant(
        "a batch never masks the newest unit's results",
        "mask_the_newest_unit",
        f"{_ENGINE}/_compaction.py",
        "        reach = max(self.kept_from, len(self.units) - 1)\n"
        "        if request.spare_newest:\n"
        "            reach = len(self.units) - 1\n",
        "        reach = len(self.units)\n",
        (
            _MASKING
            + "test_a_batch_the_older_results_cannot_free_masks_nothing_not_even_the_newest",
        ),
    ),
    Mutant(
        "from compaction 6 the newest unit is never masked, also when no unit is kept",
        "mask_the_newest_when_none_kept",
        f"{_ENGINE}/_compaction.py",
        "        if request.spare_newest:\n            reach = len(self.units) - 1\n",
        "",
        (
            _MASKING
            + "test_the_result_the_model_has_not_read_is_never_masked_even_when_no_unit_is_kept",
        ),
    ),
    Mutant(
        "compaction 6 is given to the compaction of every new run",
        "spare_newest_not_passed",
        f"{_ENGINE}/_context.py",
        "                spare_newest=self.compaction.spares_newest,\n",
        "",
        (
            _MASKING
            + "test_the_result_the_model_has_not_read_is_never_masked_even_when_no_unit_is_kept",
        ),
    ),
    Mutant(
        "from compaction 7 the summary takes the room under the target",
        "summary_room_under_the_trigger",
        f"{_ENGINE}/_compaction.py",
        "            self.room = min(self.ceiling, max(self.target_at - 1 - skeleton, reserve))\n",
        "",
        (_COMPACTION + "test_from_compaction_7_the_summary_takes_the_room_under_the_target",),
    ),
    Mutant(
        "a head too large for the target still leaves the summary its reserve",
        "summary_room_below_the_reserve",
        f"{_ENGINE}/_compaction.py",
        "max(self.target_at - 1 - skeleton, reserve)",
        "self.target_at - 1 - skeleton",
        (
            _COMPACTION
            + "test_a_head_too_large_for_the_target_still_leaves_the_summary_its_reserve",
        ),
    ),
    Mutant(
        "a segmented summary longer than its room is kept whole up to the trigger's room",
        "segment_cut_to_the_room",
        f"{_ENGINE}/_compaction.py",
        "            running = _clipped(reply.strip(), ceiling or limit, estimator)",
        "            running = _clipped(reply.strip(), limit, estimator)",
        (
            _COMPACTION
            + "test_a_compaction_below_the_trigger_but_above_the_target_says_target_not_reached",
        ),
    ),
    Mutant(
        "a summary on the conversation's prefix longer than its room is kept up to the trigger's",
        "prefix_summary_cut_to_the_room",
        f"{_ENGINE}/_compaction.py",
        "        self.body = _clipped(text, self.ceiling, request.estimator)",
        "        self.body = _clipped(text, self.room, request.estimator)",
        (_PREFIX + "test_a_long_prefix_summary_is_kept_whole_below_the_trigger",),
    ),
    Mutant(
        "a summary kept longer than its room still cites its records",
        "citation_within_the_room",
        f"{_ENGINE}/_compaction.py",
        "        if not fits(body + footer, self.ceiling):",
        "        if not fits(body + footer, self.room):",
        (_COMPACTION + "test_from_compaction_7_the_summary_takes_the_room_under_the_target",),
    ),
    Mutant(
        "a summary cut to its ceiling is reported cut, with its citation after the mark",
        "cut_mark_before_the_citation_missed",
        f"{_ENGINE}/_compaction.py",
        "        self.body, self.consumed = summary\n"
        "        # Cut to its ceiling as it was made (a kept section and the citation follow the "
        "mark).\n"
        "        self.cut = self.body.endswith(SUMMARY_CUT)\n",
        "        self.body, self.consumed = summary\n",
        (_COMPACTION + "test_a_summary_cut_to_its_ceiling_says_so_before_its_citation",),
    ),
    Mutant(
        "compaction 7 is given to the compaction of every new run",
        "summary_to_target_not_passed",
        f"{_ENGINE}/_context.py",
        "                summary_to_target=self.compaction.summarises_to_target,\n",
        "",
        (_COMPACTION + "test_from_compaction_7_the_summary_takes_the_room_under_the_target",),
    ),
    Mutant(
        "compaction 4 masks as it did: no batch before version 5",
        "batch_for_every_version",
        f"{_ENGINE}/_context.py",
        "                    if self.compaction.batches_masks",
        "                    if True",
        (
            _MASKING + "test_a_replayed_compaction_4_masks_what_it_masked",
            _MASKING + "test_under_compaction_4_the_same_view_still_masks_before_its_summary",
        ),
    ),
    Mutant(
        "from compaction 5 a masking is saved as a view: the next run keeps its stubs",
        "masks_unmasked_by_the_next_run",
        f"{_ENGINE}/_compaction_versions.py",
        "    keeps_masks=True,",
        "    keeps_masks=False,",
        (
            "tests/sessions_app/test_run_boundary.py::"
            "test_a_masked_result_stays_masked_in_the_next_runs_first_request",
        ),
    ),
    Mutant(
        "the mask batch is left out of a binding at its default",
        "batch_always_bound",
        f"{_ENGINE}/_policy.py",
        '        if policy["mask_batch_ratio"] == MASK_BATCH_RATIO:',
        "        if False:",
        (
            "tests/engine/test_policy.py::"
            "test_the_mask_batch_is_left_out_of_the_binding_at_its_default",
        ),
    ),
    # --- OAuth tool servers ----------------------------------------------------------------------
    Mutant(
        "an authorization request carries an S256 PKCE challenge",
        "oauth_pkce_plain",
        "agentloom/toolservers/_oauth.py",
        '        "code_challenge_method": "S256",',
        '        "code_challenge_method": "plain",',
        (
            "tests/console/test_oauth_tool_servers.py::test_a_member_connects_by_pkce_with_the_resource_and_runs_act_as_them",
        ),
    ),
    Mutant(
        "an authorization request names the resource (RFC 8707)",
        "oauth_resource_unnamed",
        "agentloom/toolservers/_oauth.py",
        '        "resource": authorization.resource,\n    }\n    if authorization.scope:',
        "    }\n    if authorization.scope:",
        (
            "tests/console/test_oauth_tool_servers.py::test_a_member_connects_by_pkce_with_the_resource_and_runs_act_as_them",
        ),
    ),
    Mutant(
        "an authorization's state ends only in the browser session that started it",
        "oauth_state_unbound",
        "models_app/services/tool_server_oauth.py",
        "    if pending.user_id != user.pk or not hmac.compare_digest(",
        "    if pending.user_id != user.pk and not hmac.compare_digest(",
        (
            "tests/console/test_oauth_tool_servers.py::test_state_is_bound_to_the_browser_session_and_the_user_and_used_once",
        ),
    ),
    Mutant(
        "an authorization's state is used once",
        "oauth_state_reused",
        "models_app/services/tool_server_oauth.py",
        "        pending.delete()\n",
        "        pending.save()\n",
        (
            "tests/console/test_oauth_tool_servers.py::test_state_is_bound_to_the_browser_session_and_the_user_and_used_once",
        ),
    ),
    Mutant(
        "a renewal under the row lock uses a token another call got meanwhile",
        "oauth_refresh_twice",
        "models_app/services/tool_server_oauth.py",
        "        if row.access_token != stale:\n            return row.access_token",
        "        if False:\n            return row.access_token",
        (
            "tests/console/test_oauth_tool_servers.py::test_a_refresh_race_spends_the_rotating_refresh_token_once",
        ),
    ),
    Mutant(
        "invalid_grant reads the connection again for a token refreshed meanwhile",
        "oauth_invalid_grant_final",
        "models_app/services/tool_server_oauth.py",
        "    return fresh if fresh is not None and fresh != stale else None",
        "    return None",
        (
            "tests/console/test_oauth_tool_servers.py::test_invalid_grant_reads_the_row_again_for_a_token_refreshed_meanwhile",
        ),
    ),
    Mutant(
        "a URL handed to a browser goes through the address guard",
        "oauth_authorize_unguarded",
        "agentloom/toolservers/_oauth.py",
        '            "authorization_endpoint": check(str(metadata.authorization_endpoint)),',
        '            "authorization_endpoint": str(metadata.authorization_endpoint),',
        (
            "tests/toolservers/test_oauth.py::test_an_authorization_endpoint_the_guard_refuses_ends_discovery",
        ),
    ),
    Mutant(
        "removing a member revokes their connections",
        "oauth_member_kept",
        "models_app/signals.py",
        "    member_connections_removed(space_id=instance.space_id, user_id=instance.user_id)",
        "    return None",
        (
            "tests/console/test_oauth_tool_servers.py::test_disconnecting_deleting_the_server_and_removing_the_member_revoke",
        ),
    ),
    Mutant(
        "a connection's tokens are redacted from what the space's runs write",
        "oauth_tokens_unredacted",
        "models_app/selectors.py",
        "    secrets.extend(token for pair in tokens for token in pair"
        " if len(token) >= MIN_SECRET_CHARS)",
        "    secrets.extend([])",
        (
            "tests/console/test_oauth_tool_servers.py::test_no_token_or_code_is_stored_in_clear_logged_or_returned",
        ),
    ),
    Mutant(
        "a member's run acts as the session creator's own account, never another's",
        "oauth_any_members_account",
        "models_app/services/tool_server_oauth.py",
        "        .filter(server=server, member_id=None if shared else member_id)",
        "        .filter(server=server)",
        (
            "tests/console/test_oauth_tool_servers.py::test_a_member_connects_by_pkce_with_the_resource_and_runs_act_as_them",
        ),
    ),
    # --- imported history's note (rendering 6), views a fork carries -------------------------
    Mutant(
        "rendering 6: the imported history's note comes before the first record not imported",
        "imported_note_at_the_end",
        f"{_ENGINE}/_projection.py",
        "        if self.imported is not None and record.seq > self.imported.upto:",
        "        if False:",
        (
            "tests/engine/test_rendering.py::test_rendering_6_follows_imported_history_with_one_note_that_never_moves",
            "tests/sessions_app/test_import.py::test_runs_of_an_imported_session_are_told_its_history_was_imported",
        ),
    ),
    Mutant(
        "rendering 6: a history of imported records only ends with the note",
        "imported_note_not_at_the_end",
        f"{_ENGINE}/_projection.py",
        "        self.close_group()\n        self.mark_import()",
        "        self.close_group()",
        (
            "tests/engine/test_rendering.py::test_rendering_6_follows_imported_history_with_one_note_that_never_moves",
            "tests/sessions_app/test_import.py::test_runs_of_an_imported_session_are_told_its_history_was_imported",
        ),
    ),
    Mutant(
        "rendering 6: a projection past the imported records adds no second note",
        "imported_note_repeated",
        f"{_ENGINE}/_projection.py",
        "        if self.imported is not None and floor > self.imported.upto:",
        "        if False:",
        (
            "tests/engine/test_rendering.py::test_a_projection_that_starts_past_the_imported_records_adds_no_note",
        ),
    ),
    Mutant(
        "renderings 1-5 show no note after imported history",
        "imported_note_in_old_renderings",
        f"{_ENGINE}/_projection.py",
        "        self.imported = imported if rules.marks_imports and imported"
        " and imported.upto else None",
        "        self.imported = imported if imported and imported.upto else None",
        (
            "tests/engine/test_rendering.py::test_a_session_not_imported_and_older_renderings_show_no_note",
        ),
    ),
    Mutant(
        "a fork of an imported session notes where its imported records end",
        "fork_forgets_the_import",
        "sessions_app/services/fork.py",
        '        fork.origin["imported"] = {**(import_origin(session.origin) or {}), "upto": last}',
        "        pass",
        (
            "tests/sessions_app/test_import.py::test_runs_of_an_imported_session_are_told_its_history_was_imported",
        ),
    ),
    Mutant(
        "a carried view shows the fork's copies of the records it showed",
        "carried_view_refs_unmapped",
        "sessions_app/services/fork.py",
        '        mapped["s"] = _mapped_seq(entry["s"], seqs)',
        "        pass",
        (
            "tests/sessions_app/test_fork.py::test_a_fork_after_a_views_watermark_starts_from_the_view",
        ),
    ),
    Mutant(
        "a carried view's summary cites the fork's seqs",
        "carried_summary_refs_unmapped",
        "sessions_app/services/fork.py",
        "            first = _mapped_seq(int(match[1]), seqs)",
        "            first = int(match[1])",
        (
            "tests/sessions_app/test_fork.py::test_a_fork_after_a_views_watermark_starts_from_the_view",
        ),
    ),
    Mutant(
        "a view with a reference the fork did not copy is not carried",
        "unmapped_view_carried",
        "sessions_app/services/fork.py",
        "    if seq not in seqs:\n        raise _Unmapped(seq)\n    return seqs[seq]",
        "    return seqs.get(seq, seq)",
        (
            "tests/sessions_app/test_fork.py::test_a_view_that_does_not_map_whole_or_is_revoked_is_not_carried",
        ),
    ),
    Mutant(
        "a revoked view is not carried by a fork",
        "revoked_view_carried",
        "sessions_app/services/fork.py",
        "        session=session, watermark__lte=seq, revoked_at__isnull=True",
        "        session=session, watermark__lte=seq",
        (
            "tests/sessions_app/test_fork.py::test_a_view_that_does_not_map_whole_or_is_revoked_is_not_carried",
        ),
    ),
    Mutant(
        "a fork's copies keep their local seqs: a run reference reads the fork's copy",
        "fork_drops_local_seqs",
        "sessions_app/services/fork.py",
        "        local_seq=record.local_seq,",
        "        local_seq=None,",
        (
            "tests/sessions_app/test_fork.py::test_a_fork_after_a_views_watermark_starts_from_the_view",
        ),
    ),
    Mutant(
        "a carried view keeps its records by reference rows of its own",
        "carried_view_unreferenced",
        "sessions_app/services/fork.py",
        "        reference_rows(fork.pk, entries, view=copy)",
        "        pass",
        (
            "tests/sessions_app/test_fork.py::test_a_fork_after_a_views_watermark_starts_from_the_view",
        ),
    ),
    Mutant(
        "a step measures its payload once",
        "step_measured_again",
        "agentloom/engine/_measure.py",
        "    if figures is None or server_estimator_of(estimator) is not None:",
        "    if True:",
        (
            "tests/engine/test_measure.py::test_each_step_measures_the_payload_it_sends_once",
            "tests/engine/test_measure.py::test_an_estimator_with_its_own_bound_computes_each_figure_once_a_step",
        ),
    ),
    Mutant(
        "the engine opens one measure for each step",
        "step_unscoped",
        "agentloom/engine/_engine.py",
        "            with one_measure_per_step():",
        "            with nullcontext():",
        ("tests/engine/test_measure.py::test_each_step_measures_the_payload_it_sends_once",),
    ),
    Mutant(
        "a figure is given again only for the same payload",
        "step_any_payload",
        "agentloom/engine/_measure.py",
        "        if last is None or last[0] is not estimator or last[1:] != sent[1:]:",
        "        if last is None or last[0] is not estimator:",
        (
            "tests/engine/test_measure.py::test_a_step_measures_another_payload_anew_and_the_same_one_from_equal_items",
            "tests/engine/test_measure.py::test_a_changed_item_is_measured_anew",
        ),
    ),
    Mutant(
        "only the default upper bound is the estimate",
        "step_bound_as_estimate",
        "agentloom/engine/_measure.py",
        "        if type(self.inner).upper_bound is TokenEstimator.upper_bound:",
        "        if True:",
        (
            "tests/engine/test_measure.py::test_an_estimator_with_its_own_bound_computes_each_figure_once_a_step",
        ),
    ),
    Mutant(
        "a record's stored size is carried only to the same JSON",
        "size_carried_to_any",
        "agentloom/engine/_sizecache.py",
        "    if size is not None and same_json(item, source):",
        "    if size is not None:",
        (
            "tests/engine/test_sizecache.py::test_a_size_is_carried_only_to_the_same_json",
            "tests/engine/test_projection.py::test_a_history_read_anew_is_measured_from_the_sizes_its_records_carry",
        ),
    ),
    Mutant(
        "the same JSON is stricter than equality",
        "same_json_as_equality",
        "agentloom/engine/_sizecache.py",
        "    if a is b:",
        "    if a == b:",
        (
            "tests/engine/test_sizecache.py::test_values_equal_in_python_but_not_in_json_are_not_the_same_json",
            "tests/engine/test_sizecache.py::test_a_size_is_carried_only_to_the_same_json",
        ),
    ),
    Mutant(
        "projection carries a record's size to the message it shows as recorded",
        "projection_sizes_dropped",
        "agentloom/engine/_projection.py",
        "    carry_json_bytes(message, record.message, record.size)",
        "    pass",
        (
            "tests/engine/test_projection.py::test_a_history_read_anew_is_measured_from_the_sizes_its_records_carry",
        ),
    ),
    Mutant(
        "a point read anew carries its records' sizes",
        "point_sizes_dropped",
        "agentloom/engine/_projection.py",
        """                carry_json_bytes(message, record, sizes.get(entry["s"]))""",
        "                pass",
        (
            "tests/sessions_app/test_projection_points.py::test_a_history_read_anew_is_measured_without_serialising_what_it_shows_as_recorded",
        ),
    ),
    Mutant(
        "the journal reader gives each record its stored size",
        "reader_sizes_dropped",
        "sessions_app/selectors/history.py",
        "            size=size,",
        "            size=None,",
        (
            "tests/sessions_app/test_projection_points.py::test_a_history_read_anew_is_measured_without_serialising_what_it_shows_as_recorded",
        ),
    ),
    Mutant(
        "a stored size is the UTF-8 length of the stored text",
        "stored_size_in_characters",
        "agentloom/encryption.py",
        "    return json.loads(text), len(data)",
        "    return json.loads(text), len(text)",
        (
            "tests/sessions_app/test_encryption_keys.py::test_a_value_is_read_with_the_byte_size_of_its_compact_json",
        ),
    ),
    Mutant(
        "text with a lone surrogate has no known size",
        "surrogate_sized",
        "agentloom/encryption.py",
        "        return _from_json(data), None",
        "        return _from_json(data), len(data)",
        (
            "tests/sessions_app/test_encryption_keys.py::test_a_size_is_not_known_for_a_legacy_value_or_a_lone_surrogate",
        ),
    ),
    # --- the stored forms of an encrypted value ------------------------------------------------
    Mutant(
        "a value is stored as a binary Fernet token after its mark",
        "token_stored_as_base64",
        "agentloom/encryption.py",
        "    return BINARY_MARK + base64.urlsafe_b64decode(_primary().encrypt(data))",
        "    return _primary().encrypt(data)",
        (
            f"{_KEYS}test_each_stored_form_reads_back[binary-False]",
            f"{_KEYS}test_a_journal_row_is_stored_a_quarter_smaller_than_its_base64_token",
        ),
    ),
    Mutant(
        "a binary token is read back as the token it is",
        "binary_token_unread",
        "agentloom/encryption.py",
        "    if token[:1] == BINARY_MARK:\n        return base64.urlsafe_b64encode(",
        "    if token[:1] == b'never':\n        return base64.urlsafe_b64encode(",
        (f"{_KEYS}test_each_stored_form_reads_back[binary-True]",),
    ),
    Mutant(
        "base64 tokens written before the binary form still read",
        "base64_token_unread",
        "agentloom/encryption.py",
        "        return base64.urlsafe_b64encode(token[len(BINARY_MARK) :])\n    return token\n",
        "        return base64.urlsafe_b64encode(token[len(BINARY_MARK) :])\n    return b''\n",
        (f"{_KEYS}test_each_stored_form_reads_back[base64-False]",),
    ),
    Mutant(
        "after the binary mark only a binary token reads (never base64 text)",
        "marked_base64_read",
        "agentloom/encryption.py",
        "        return base64.urlsafe_b64encode(token[len(BINARY_MARK) :])",
        "        return token[1:] if token[1:2] == b'g' else base64.urlsafe_b64encode(token[1:])",
        (f"{_KEYS}test_a_mark_with_anything_but_its_form_is_unreadable[base64-marked]",),
    ),
    Mutant(
        "key rotation rewrites base64 tokens in the binary form",
        "base64_token_current",
        "agentloom/encryption.py",
        "    if token[:1] != BINARY_MARK:\n        return False\n",
        "",
        (f"{_KEYS}test_rotation_rewrites_base64_values_in_the_binary_and_empty_forms",),
    ),
    Mutant(
        "an empty value is stored as its mark and its JSON, without a token",
        "empty_value_encrypted",
        "agentloom/encryption.py",
        "    if data in _EMPTY_JSON:\n        return EMPTY_MARK + data\n",
        "",
        (
            f"{_KEYS}test_an_empty_value_is_its_mark_and_json_and_needs_no_key",
            f"{_KEYS}test_a_runs_empty_defaults_are_stored_in_three_bytes",
        ),
    ),
    Mutant(
        "after the empty mark only an empty value's JSON reads",
        "empty_mark_reads_any_json",
        "agentloom/encryption.py",
        "    if data not in _EMPTY_JSON:\n        raise UnreadableValue(",
        "    if data is None:\n        raise UnreadableValue(",
        (f"{_KEYS}test_a_mark_with_anything_but_its_form_is_unreadable[empty-mark-value]",),
    ),
    Mutant(
        "an empty value needs no key, so rotation leaves it",
        "empty_value_rewritten",
        "agentloom/encryption.py",
        "        return token[len(EMPTY_MARK) :] in _EMPTY_JSON",
        "        return False",
        (f"{_KEYS}test_rotation_rewrites_base64_values_in_the_binary_and_empty_forms",),
    ),
    # --- the net cost of a compaction (computed on read) ---------------------------------------
    Mutant(
        "what a compaction saved is computed on read, never written into the checkpoint read",
        "saved_cost_written_into_the_log",
        _COSTS,
        '        items[n]["saved_cost"] = saved_value(removed, sent)',
        '        items[n]["saved_cost"] = entry["saved_cost"] = saved_value(removed, sent)',
        (f"{_MONEY}test_reading_the_figures_writes_nothing_back",),
    ),
    Mutant(
        "a run's last compaction saves in the following runs only until one compacts again",
        "saving_past_the_next_compaction",
        _COSTS,
        '        if counters.get("baseline_model_steps") != steps or not isinstance(',
        "        if not isinstance(",
        (f"{_MONEY}test_spent_and_saved_are_sums_over_the_call_rows_at_their_own_prices",),
    ),
    Mutant(
        "each request values the removed units at the prices it copied",
        "saved_at_one_requests_prices",
        _COSTS,
        '        items[n]["saved_cost"] = saved_value(removed, sent)',
        '        items[n]["saved_cost"] = saved_value(removed, sent[-1:] * len(sent))',
        (f"{_MONEY}test_spent_and_saved_are_sums_over_the_call_rows_at_their_own_prices",),
    ),
    Mutant(
        "a request's cached tokens value the removed units at its cached price",
        "saved_cached_at_the_input_price",
        _COSTS,
        "            cached_tokens=request.cached_tokens,",
        "            cached_tokens=0,",
        (f"{_MONEY}test_spent_and_saved_are_sums_over_the_call_rows_at_their_own_prices",),
    ),
    Mutant(
        "an attempt is spent its own calls, in order, as many as it logged",
        "spent_of_the_first_calls",
        _COSTS,
        "        own = calls[start : start + count]",
        "        own = calls[:count]",
        (f"{_MONEY}test_each_attempt_is_spent_its_own_calls_in_order",),
    ),
    Mutant(
        "a discarded call is no call of the attempt the checkpoint logged",
        "spent_counts_discarded_calls",
        _COSTS,
        "purpose=ModelCall.Purpose.COMPACTION, discarded=False",
        "purpose=ModelCall.Purpose.COMPACTION",
        (f"{_MONEY}test_each_attempt_is_spent_its_own_calls_in_order",),
    ),
    Mutant(
        "a following run that compacts again counts up to its own compaction",
        "partial_run_uncounted",
        _COSTS,
        "        kept.append((*stop, replaced_at))",
        "        pass",
        (f"{_MONEY}test_a_following_run_that_compacts_again_counts_up_to_its_compaction",),
    ),
    Mutant(
        "it counts only when the view its compaction saved derives from the stage's view",
        "replaced_at_any_derivation",
        _COSTS,
        "    if first is None or first[:2] != (run.pk, steps):",
        "    if first is None:",
        (f"{_MONEY}test_a_following_run_that_compacts_again_counts_up_to_its_compaction",),
    ),
    Mutant(
        "OpenAI's cache double caches nothing below 1,024 shared tokens",
        "openai_cache_without_minimum",
        _PROMPT_CACHE,
        "        cached = matched // BLOCK * BLOCK if matched >= MINIMUM else 0\n",
        "        cached = matched // BLOCK * BLOCK\n",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_openai_caches_the_longest_shared_prefix_in_blocks_from_1024_tokens",
        ),
    ),
    Mutant(
        "OpenAI's cache double caches whole blocks of 128 tokens",
        "openai_cache_without_blocks",
        _PROMPT_CACHE,
        "        cached = matched // BLOCK * BLOCK if matched >= MINIMUM else 0\n",
        "        cached = matched if matched >= MINIMUM else 0\n",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_openai_caches_the_longest_shared_prefix_in_blocks_from_1024_tokens",
        ),
    ),
    Mutant(
        "DeepSeek's cache double hits whole units only, never a shared prefix",
        "deepseek_cache_shared_prefix_hits",
        _PROMPT_CACHE,
        "        cached = self._hit(parts, keys)\n",
        "        cached = self.prompts.tokens(parts, *self.prompts.shared(parts, keys))\n",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_persists_a_common_prefix_for_the_requests_after_the_one_that_shows_it",
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_hits_only_whole_units",
        ),
    ),
    Mutant(
        "DeepSeek's cache double persists a unit at the end of each output",
        "deepseek_cache_no_output_unit",
        _PROMPT_CACHE,
        "self._persist(hash((keys[-1], output))",
        "(lambda *_: None)(hash((keys[-1], output))",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_hits_the_unit_at_the_end_of_an_earlier_output",
        ),
    ),
    Mutant(
        "DeepSeek's cache double persists a prefix common to earlier requests",
        "deepseek_cache_no_common_unit",
        _PROMPT_CACHE,
        "        self._persist(keys[whole], partial, self.prompts.tokens(parts, whole, partial))\n",
        "        pass\n",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_persists_a_common_prefix_for_the_requests_after_the_one_that_shows_it",
        ),
    ),
    Mutant(
        "DeepSeek's cache double persists units at fixed token intervals",
        "deepseek_cache_no_interval_units",
        _PROMPT_CACHE,
        "            while mark < done + size:\n",
        "            while False:\n",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_persists_units_at_fixed_intervals_of_a_long_input",
        ),
    ),
    Mutant(
        "a unit cut inside a part hits only a request whose part starts with the cut",
        "deepseek_cache_cut_hits_any_part",
        _PROMPT_CACHE,
        " and parts[index].startswith(start))",
        ")",
        (
            "tests/providers/test_prompt_cache_doubles.py::test_deepseek_persists_units_at_fixed_intervals_of_a_long_input",
        ),
    ),
    Mutant(
        "rendering 7: a result a run masked stays a stub in a new run's projection",
        "carried_masks_ignored",
        f"{_ENGINE}/_projection.py",
        "        self.masks = dict(masks or {}) if rules.keeps_masks else {}",
        "        self.masks = {}",
        (
            "tests/engine/test_rendering.py::test_rendering_7_shows_each_result_a_run_masked_as_that_runs_stub",
            "tests/sessions_app/test_run_boundary.py::test_from_rendering_7_masks_no_view_keeps_reach_the_next_run_as_they_were_sent",
            "tests/sessions_app/test_run_boundary.py::test_a_run_resumed_after_failing_keeps_its_masks_for_the_next_run",
            "tests/sessions_app/test_run_boundary.py::test_a_run_with_another_runs_supplement_inside_keeps_its_masks_for_the_next_run",
            "tests/sessions_app/test_run_boundary.py::test_a_run_cancelled_while_a_call_waits_keeps_its_masks_for_the_next_run",
        ),
    ),
    Mutant(
        "renderings 1-6 show a masked result whole in a new run's projection",
        "carried_masks_in_old_renderings",
        f"{_ENGINE}/_projection.py",
        "        self.masks = dict(masks or {}) if rules.keeps_masks else {}",
        "        self.masks = dict(masks or {})",
        (
            "tests/engine/test_rendering.py::test_renderings_1_to_6_show_masked_results_whole",
            "tests/sessions_app/test_run_boundary.py::test_before_compaction_5_the_next_run_shows_masked_results_whole",
        ),
    ),
    Mutant(
        "a carried stub names the reference the masking run gave it",
        "carried_stub_renamed",
        f"{_ENGINE}/_projection.py",
        "            origin = _masked_origin(origin, ref)",
        '            origin = _masked_origin(origin, f"s:{record.seq}")',
        (
            "tests/engine/test_rendering.py::test_rendering_7_shows_each_result_a_run_masked_as_that_runs_stub",
            "tests/sessions_app/test_run_boundary.py::test_a_run_resumed_after_failing_keeps_its_masks_for_the_next_run",
        ),
    ),
    Mutant(
        "rendering 7: the view a new run starts from shows a later masking's stubs",
        "view_not_remasked",
        f"{_ENGINE}/_projection.py",
        "    projector.remask(history.messages, history.origins)",
        "    pass",
        (
            "tests/engine/test_rendering.py::test_rendering_7_shows_a_result_masked_after_the_view_was_saved_as_its_stub",
            "tests/sessions_app/test_run_boundary.py::test_a_run_cancelled_while_a_call_waits_keeps_its_masks_for_the_next_run",
        ),
    ),
    Mutant(
        "a point resumed after a later masking shows that mask too",
        "point_not_remasked",
        f"{_ENGINE}/_projection.py",
        '            ref = self.masks.get(origin["s"])',
        "            ref = None",
        (
            "tests/engine/test_projection_points.py::test_a_result_masked_after_a_point_was_made_is_masked_when_it_is_resumed",
        ),
    ),
    Mutant(
        "the masks a new run is given are read from the runs' stored snapshots",
        "masks_not_read",
        "sessions_app/selectors/masks.py",
        '        masks.update(_masked_in(run_id, snapshot.get("view") or []))',
        "        pass",
        (
            "tests/sessions_app/test_masks.py::test_a_snapshots_stubs_are_found_by_session_seq_with_their_references",
            "tests/sessions_app/test_run_boundary.py::test_from_rendering_7_masks_no_view_keeps_reach_the_next_run_as_they_were_sent",
            "tests/sessions_app/test_run_boundary.py::test_a_run_resumed_after_failing_keeps_its_masks_for_the_next_run",
        ),
    ),
    Mutant(
        "a stub's own record is found by its run's local seq",
        "own_masks_unmapped",
        "sessions_app/selectors/masks.py",
        "        found.update((seq, own[local]) for local, seq in rows)",
        "        found.update((local, own[local]) for local, seq in rows)",
        (
            "tests/sessions_app/test_masks.py::test_a_snapshots_stubs_are_found_by_session_seq_with_their_references",
        ),
    ),
    Mutant(
        "a replay gives its run the masks its history block names, not today's",
        "replay_with_todays_masks",
        "sessions_app/services/replay.py",
        "                masks=block_masks(_inherited_block(run.checkpoint or {})),",
        "                masks=None,",
        (
            "tests/sessions_app/test_compaction_snapshots.py::test_a_checkpoint_points_to_its_snapshots_stored_once",
        ),
    ),
    Mutant(
        "a checkpoint's history block is rebuilt with the masks it names",
        "block_rebuilt_without_masks",
        "sessions_app/selectors/history.py",
        "        masks=block_masks(block),",
        "        masks=None,",
        (
            "tests/sessions_app/test_run_boundary.py::test_a_run_resumed_after_failing_keeps_its_masks_for_the_next_run",
            "tests/sessions_app/test_run_boundary.py::test_a_run_with_another_runs_supplement_inside_keeps_its_masks_for_the_next_run",
        ),
    ),
    Mutant(
        "a large inline message is stored once, a marker in its place",
        "summary_kept_inline",
        "sessions_app/services/stored_messages.py",
        '    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")))'
        " >= ONCE_BYTES",
        "    return False",
        (
            "tests/sessions_app/test_stored_messages.py::test_a_summary_is_stored_once_however_many_snapshots_and_views_show_it",
        ),
    ),
    Mutant(
        "a stored snapshot's markers are read back with the checkpoint",
        "snapshot_markers_unread",
        "sessions_app/selectors/checkpoints.py",
        "with_snapshots(checkpoint, snapshots_read(run.session_id, stored))",
        "with_snapshots(checkpoint, stored)",
        (
            "tests/sessions_app/test_stored_messages.py::test_a_summary_is_stored_once_however_many_snapshots_and_views_show_it",
        ),
    ),
    Mutant(
        "a view's markers are read back with its messages",
        "view_markers_unread",
        "sessions_app/selectors/views.py",
        "    inline = messages_read(view.session_id, view.messages)",
        "    inline = view.messages",
        (
            "tests/sessions_app/test_stored_messages.py::test_the_model_is_sent_the_summary_a_view_stores_once",
        ),
    ),
    Mutant(
        "the digest of a message stored once is keyed by the session",
        "once_digest_unkeyed",
        "agentloom/encryption.py",
        '    info = _ONCE_INFO + b"\\0" + str(session_id).encode()',
        "    info = _ONCE_INFO",
        (
            "tests/sessions_app/test_stored_messages.py::test_the_digest_is_the_sessions_and_the_keys",
        ),
    ),
    Mutant(
        "a snapshot holding no large inline message is left as it is (the migration repeats)",
        "once_rewrites_converted",
        "sessions_app/services/stored_messages.py",
        "    if kept is inline:\n        return snapshot\n",
        "",
        (
            "tests/sessions_app/test_stored_messages.py::test_the_migration_stores_old_rows_messages_once_resumably",
        ),
    ),
    Mutant(
        "the admin shows a view's summary, not its marker",
        "admin_shows_markers",
        "sessions_app/admin.py",
        "        return json_tree(messages_read(obj.session_id, obj.messages))",
        "        return json_tree(obj.messages)",
        (
            "tests/sessions_app/test_stored_messages.py::test_the_admin_shows_a_views_summary_not_its_marker",
        ),
    ),
    Mutant(
        "a fork stores the messages its views name in its own session",
        "fork_markers_borrowed",
        "sessions_app/services/fork.py",
        "            messages=stored_once(fork.pk, messages),",
        "            messages=view.messages,",
        (
            "tests/sessions_app/test_stored_messages.py::test_a_fork_and_an_export_carry_the_summary",
        ),
    ),
    Mutant(
        "a journal page copies each message's stored JSON text, parsing none",
        "journal_page_parses_messages",
        "sessions_app/serializers.py",
        "        return _compact_json(json.loads(text)).encode()\n    return text\n",
        "        return _compact_json(json.loads(text)).encode()\n"
        "    return _compact_json(json.loads(text)).encode()\n",
        (
            "tests/api/test_journal.py::test_a_page_copies_each_message_as_stored_and_reads_as_the_renderer_writes_it",
        ),
    ),
    Mutant(
        "a journal page escapes U+2028 and U+2029 as the renderer does",
        "journal_page_line_separators",
        "sessions_app/serializers.py",
        '    return body.replace(b"\\xe2\\x80\\xa8", b"\\\\u2028")'
        '.replace(b"\\xe2\\x80\\xa9", b"\\\\u2029")',
        "    return body",
        (
            "tests/api/test_journal.py::test_a_page_copies_each_message_as_stored_and_reads_as_the_renderer_writes_it",
        ),
    ),
    Mutant(
        "a journal page writes a lone surrogate escaped",
        "journal_page_lone_surrogate",
        "sessions_app/serializers.py",
        "            return _compact_json(value, ascii=True).encode()",
        "            return _compact_json(value).encode()",
        ("tests/api/test_journal.py::test_a_message_with_a_lone_surrogate_is_written_escaped",),
    ),
    Mutant(
        'the journal rows "Load more" fetches name the fork they post to',
        "rows_fork_url_unnamed",
        "templates/console/_journal_rows.html",
        "{% url 'console-session-fork' session.pk as fork_url %}",
        "",
        ("tests/sessions_app/test_fork.py::test_the_api_and_the_journal_page_fork",),
    ),
    Mutant(
        "the journal page's rows name the fork they post to",
        "page_fork_url_unnamed",
        "templates/console/journal.html",
        "{% url 'console-session-fork' session.pk as fork_url %}",
        "",
        ("tests/sessions_app/test_fork.py::test_the_api_and_the_journal_page_fork",),
    ),
    Mutant(
        "choosing a view reads no derivations while no view of the session is revoked",
        "derivations_always_read",
        "sessions_app/selectors/views.py",
        "    if not SessionView.objects.filter(session=session, revoked_at__isnull=False)"
        ".exists():\n        return chosen\n",
        "",
        (
            "tests/sessions_app/test_view_revocation.py::test_choosing_a_view_reads_no_derivations_while_no_view_is_revoked",
        ),
    ),
    Mutant(
        "with a view revoked, a view derived from it is never chosen",
        "derivations_never_read",
        "sessions_app/selectors/views.py",
        "    if not SessionView.objects.filter(session=session, revoked_at__isnull=False)"
        ".exists():",
        "    if True:",
        (
            "tests/sessions_app/test_view_revocation.py::test_views_derived_from_a_revoked_view_are_never_chosen",
            "tests/sessions_app/test_view_revocation.py::test_choosing_a_view_reads_no_derivations_while_no_view_is_revoked",
        ),
    ),
    # --- a succeeded run's final checkpoint (services.journal.finished_checkpoint) -------------
    Mutant(
        "only a run that succeeded (never resumed) stores the slim checkpoint",
        "slim_failed_runs_too",
        "sessions_app/services/journal.py",
        'if ending.get("status") == Run.Status.SUCCEEDED:',
        'if ending.get("status"):',
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_a_failed_run_keeps_its_whole_checkpoint_and_resumes",
        ),
    ),
    Mutant(
        "a succeeded run's checkpoint leaves out the state only a resume reads",
        "slim_keeps_resume_state",
        "sessions_app/services/journal.py",
        "                    stored = finished_checkpoint(stored, frame)",
        "                    pass",
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_a_succeeded_run_stores_only_what_its_readers_read",
        ),
    ),
    Mutant(
        "a compaction log row leaves out only the sources its snapshot holds equal",
        "slim_drops_unequal_sources",
        "sessions_app/services/journal.py",
        'and row["sources"] == snapshot.get("sources"):',
        ":",
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_sources_are_left_out_only_where_the_snapshot_holds_the_same",
        ),
    ),
    Mutant(
        "a succeeded run's checkpoint leaves out the candidate answer its row holds",
        "slim_keeps_the_answer",
        "sessions_app/services/journal.py",
        '        del state["candidate_answer"]\n',
        "        pass\n",
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_a_succeeded_run_stores_only_what_its_readers_read",
        ),
    ),
    Mutant(
        "the candidate answer a slim checkpoint leaves out is read back from the run's row",
        "slim_answer_unread",
        "sessions_app/selectors/checkpoints.py",
        "    checkpoint = with_answer(run.checkpoint, run)\n",
        "    checkpoint = run.checkpoint\n",
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_a_succeeded_run_stores_only_what_its_readers_read",
        ),
    ),
    Mutant(
        "a log row's sources are read back from its snapshot",
        "slim_sources_unread",
        "sessions_app/selectors/checkpoints.py",
        "    return with_sources(whole)",
        "    return whole",
        (
            "tests/sessions_app/test_finished_checkpoints.py::test_a_succeeded_run_stores_only_what_its_readers_read",
            "tests/sessions_app/test_finished_checkpoints.py::test_every_reader_reads_the_slim_form_as_the_whole_one",
        ),
    ),
    Mutant(
        "a view's summary stands for its records in ranges across status records",
        "summary_sources_split_at_status",
        _VIEWS,
        "    ranges = across_status(session_id, union_ranges(session))",
        "    ranges = union_ranges(session)",
        (
            "tests/sessions_app/test_references.py::test_a_summary_stands_for_a_long_prefix_in_one_range",
            "tests/sessions_app/test_references.py::test_a_summary_saved_one_range_per_turn_still_reads_and_joins",
        ),
    ),
    Mutant(
        "a compaction's sources join adjacent ranges",
        "sources_adjacent_unjoined",
        f"{_ENGINE}/_ranges.py",
        "        if union and first <= union[-1][1] + 1:",
        "        if union and first <= union[-1][1]:",
        (
            "tests/engine/test_refs.py::test_a_union_joins_adjacent_and_held_ranges_and_keeps_gaps",
            "tests/sessions_app/test_references.py::test_a_summary_stands_for_a_long_prefix_in_one_range",
        ),
    ),
    Mutant(
        "a range held inside another does not shorten the union",
        "sources_nested_range_shortens",
        f"{_ENGINE}/_ranges.py",
        "            union[-1][1] = max(union[-1][1], last)",
        "            union[-1][1] = last",
        ("tests/engine/test_refs.py::test_a_union_joins_adjacent_and_held_ranges_and_keeps_gaps",),
    ),
    Mutant(
        "a question finds runs never journaled by the (status, session) index",
        "unjournaled_ordered_by_query",
        "sessions_app/services/legacy.py",
        """        .order_by()\n    )\n    # Put in run order here""",
        """        .order_by("number")\n    )\n    # Put in run order here""",
        (
            "tests/sessions_app/test_run_plans.py::test_a_questions_checks_and_the_sweep_find_runs_by_status",
        ),
    ),
    Mutant(
        "a session is looked at once for runs never journaled",
        "unjournaled_looked_for_always",
        "sessions_app/services/legacy.py",
        "    if session.runs_journaled:",
        "    if False:",
        (
            "tests/sessions_app/test_run_plans.py::test_a_session_is_looked_at_once_for_runs_never_journaled",
        ),
    ),
    Mutant(
        "the look marks the session",
        "unjournaled_look_unmarked",
        "sessions_app/services/legacy.py",
        "    Session.objects.filter(pk=session.pk).update(runs_journaled=True)\n",
        "",
        (
            "tests/sessions_app/test_run_plans.py::test_a_session_is_looked_at_once_for_runs_never_journaled",
        ),
    ),
    Mutant(
        "a session opened now has no run to look for",
        "new_session_looked_at",
        "sessions_app/models.py",
        "    runs_journaled = models.BooleanField(default=True)",
        "    runs_journaled = models.BooleanField(default=False)",
        (
            "tests/sessions_app/test_run_plans.py::test_a_session_is_looked_at_once_for_runs_never_journaled",
        ),
    ),
    Mutant(
        "an imported session is looked at once for runs never journaled",
        "imported_session_not_looked_at",
        "sessions_app/services/imports.py",
        "            runs_journaled=False,",
        "            runs_journaled=True,",
        (
            "tests/sessions_app/test_import.py::test_a_run_with_no_record_in_the_file_is_adopted_by_the_first_question",
        ),
    ),
    Mutant(
        "runs never journaled are adopted in run order",
        "unjournaled_out_of_order",
        "sessions_app/services/legacy.py",
        "sorted(unjournaled, key=lambda run: run.number)",
        "sorted(unjournaled, key=lambda run: -run.number)",
        ("tests/sessions_app/test_legacy.py::test_a_new_question_adopts_unjournaled_runs_first",),
    ),
    Mutant(
        "the lease sweep finds active runs by the (status, session) index",
        "sweep_ordered_by_number",
        "sessions_app/services/runs.py",
        "lease_expires_at__lt=now).order_by()",
        "lease_expires_at__lt=now)",
        (
            "tests/sessions_app/test_run_plans.py::test_a_questions_checks_and_the_sweep_find_runs_by_status",
        ),
    ),
    Mutant(
        "a citation names its records as ranges, spans joined",
        "citation_spans_unjoined",
        f"{_ENGINE}/_identifiers.py",
        "        for first, last in union_ranges(ranges)",
        "        for first, last in ranges",
        (
            "tests/engine/test_identifiers.py::test_a_citation_joins_records_and_spans_into_ranges_per_prefix",
        ),
    ),
    Mutant(
        "a fork carries a summary's range only if it copied every record in it",
        "fork_range_gap_carried",
        "sessions_app/services/fork.py",
        "    if end - start != last - first:",
        "    if False:",
        (
            "tests/sessions_app/test_fork.py::test_a_summary_range_over_a_record_the_fork_does_not_copy_is_not_carried",
        ),
    ),
    Mutant(
        "a fork maps a summary's ranges to the copies",
        "fork_range_unmapped",
        "sessions_app/services/fork.py",
        "    return [start, end]",
        "    return [first, last]",
        (
            "tests/sessions_app/test_fork.py::test_a_fork_after_a_views_watermark_starts_from_the_view",
        ),
    ),
    Mutant(
        "a run's question, answer and pinned text are compressed before encryption",
        "prose_stored_uncompressed",
        "agentloom/fields.py",
        '    (questions, answers, supplements, pinned instructions)."""\n\n    compress = True\n',
        '    (questions, answers, supplements, pinned instructions)."""\n\n    compress = False\n',
        (_KEYS + "test_prose_columns_are_stored_compressed_and_older_values_still_read",),
    ),
    Mutant(
        "a binary token is opened only when its HMAC is a field key's",
        "binary_token_mac_unchecked",
        "agentloom/encryption.py",
        '        if not hmac.compare_digest(hmac.digest(signing, body, "sha256"), mac):\n'
        "            continue\n",
        '        if False and not hmac.compare_digest(hmac.digest(signing, body, "sha256"), mac):\n'
        "            continue\n",
        (_KEYS + "test_a_token_is_opened_only_when_its_mac_is_a_field_keys",),
    ),
    Mutant(
        "a binary token's plaintext is what Fernet returns (its padding removed)",
        "binary_token_padding_kept",
        "agentloom/encryption.py",
        "        return padded[:-pad]\n",
        "        return padded[: -pad + 1 or None]\n",
        (_KEYS + "test_a_token_is_opened_only_when_its_mac_is_a_field_keys",),
    ),
    Mutant(
        "asking reads the version's connection once, for the redaction and the door",
        "ask_reads_the_connection_twice",
        "sessions_app/services/runs.py",
        "    question = redactor_for(session.agent_version, connection=connection)"
        ".text(question)\n",
        "    question = redactor_for(session.agent_version).text(question)\n",
        ("tests/api/test_runs.py::test_asking_reads_the_connection_and_the_locked_session_once",),
    ),
    Mutant(
        "asking redacts with the connection as it is now (a key rotated since included)",
        "ask_redacts_with_a_held_connection",
        "sessions_app/services/runs.py",
        "    connection = connection_now(session.agent_version)\n",
        "    connection = session.agent_version.model_connection\n",
        ("tests/sessions_app/test_redaction_paths.py::test_a_rotated_key_stays_redacted",),
    ),
    Mutant(
        "a run just asked is answered without reading its cost (it has made no call)",
        "ask_reads_the_cost",
        "sessions_app/serializers.py",
        '        if self.context.get("just_asked"):\n',
        '        if False and self.context.get("just_asked"):\n',
        ("tests/api/test_runs.py::test_asking_reads_the_connection_and_the_locked_session_once",),
    ),
    Mutant(
        "a session renamed before its first question keeps its title (read under the lock)",
        "ask_titles_a_renamed_session",
        "sessions_app/services/runs.py",
        "    if title:\n        return\n",
        "    if False:\n        return\n",
        ("tests/sessions_app/test_titles.py",),
    ),
    Mutant(
        "a view's records are searched within their seq range, whatever the statistics say",
        "journal_read_unbounded",
        "sessions_app/selectors/journal.py",
        "        session_id=session_id, seq__gte=min(wanted), seq__lte=max(wanted), "
        "seq__in=wanted\n",
        "        session_id=session_id, seq__in=wanted\n",
        (
            "tests/sessions_app/test_run_plans.py::"
            "test_a_views_records_are_searched_within_their_range_whatever_the_statistics",
        ),
        postgres=True,
    ),
    Mutant(
        "a ready worker freezes what it loaded, out of the collector's full collections",
        "worker_objects_unfrozen",
        "agentloom/startup.py",
        "    gc.freeze()\n",
        "",
        (
            "tests/foundation/test_worker_processes.py::"
            "test_a_ready_worker_keeps_what_it_loaded_out_of_full_collections",
        ),
    ),
)


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    killed: bool
    killers: tuple[str, ...]
    seconds: float
    note: str = ""


def applied(mutant: Mutant, source: str) -> str:
    """Return `source` with the mutant applied; raise SnippetError unless its snippet is unique."""
    count = source.count(mutant.before)
    if count != 1:
        raise SnippetError(
            f"{mutant.name}: the snippet occurs {count} times in {mutant.path} (expected exactly "
            f"once; re-point the mutant):\n{textwrap.indent(mutant.before, '    ')}"
        )
    return source.replace(mutant.before, mutant.after)


class SnippetError(Exception):
    """A mutant's snippet does not occur exactly once: the source moved under it."""


def check(mutants: tuple[Mutant, ...], root: Path) -> list[str]:
    """Return the problems of `mutants` against the tree at `root` (empty: all apply)."""
    problems = []
    names = [mutant.name for mutant in mutants]
    problems += [
        f"{name}: two mutants share this name" for name in set(names) if names.count(name) > 1
    ]
    for mutant in mutants:
        path = root / mutant.path
        if not path.is_file():
            problems.append(f"{mutant.name}: no file {mutant.path}")
            continue
        try:
            changed = applied(mutant, path.read_text())
        except SnippetError as exc:
            problems.append(str(exc))
            continue
        if changed == path.read_text():
            problems.append(f"{mutant.name}: the change leaves {mutant.path} as it was")
        for test in mutant.tests:
            if not (root / test.split("::", 1)[0]).is_file():
                problems.append(f"{mutant.name}: no test file for {test}")
    return problems


def scratch_copy() -> Path:
    """Return a scratch copy of the working tree (uncommitted files included)."""
    scratch = Path(tempfile.mkdtemp(prefix="agentloom-mutants-")) / "tree"
    shutil.copytree(ROOT, scratch, ignore=_IGNORED, symlinks=True)
    (scratch / "_mutants_plugin.py").write_text(_PLUGIN)
    # Installed packages are not copied but linked: the reference tool server's tests need them.
    for modules in ROOT.glob("tests/**/node_modules"):
        if modules.is_dir() and "node_modules" not in modules.parent.parts:
            (scratch / modules.relative_to(ROOT)).symlink_to(modules, target_is_directory=True)
    return scratch


def postgres_url() -> str | None:
    """Return DATABASE_URL when it names a PostgreSQL database (the `postgres` mutants' leg)."""
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


def pytest(
    scratch: Path, tests: tuple[str, ...], *, postgres: bool = False
) -> tuple[int, tuple[str, ...], str]:
    """Run `tests` in `scratch` on SQLite, or in the PostgreSQL leg; return (exit code, failed
    node ids, output tail)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "AGENTLOOM_TEST_LEG", "CI")
    }
    if postgres:
        environment["DATABASE_URL"] = postgres_url()
        environment["AGENTLOOM_TEST_LEG"] = "postgres"
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_mutants_plugin",
        "--no-header", "-rfE", f"--timeout={MUTANT_SECONDS}", *tests,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command,
            cwd=scratch,
            env=environment,
            capture_output=True,
            text=True,
            timeout=MUTANT_SECONDS + 60,
        )
    except subprocess.TimeoutExpired:
        return -1, ("(timeout)",), ""
    output = done.stdout + done.stderr
    failed = tuple(
        dict.fromkeys(
            match.group(1) for match in re.finditer(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
        )
    )
    return done.returncode, failed, "\n".join(output.splitlines()[-25:])


def run(mutant: Mutant, scratch: Path) -> Result:
    """Apply `mutant` in `scratch`, run its tests, restore the file; return what happened."""
    path = scratch / mutant.path
    original = path.read_text()
    path.write_text(applied(mutant, original))
    started = time.perf_counter()
    try:
        code, failed, tail = pytest(scratch, mutant.tests, postgres=mutant.postgres)
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - started
    if code == 0:
        return Result(mutant, False, (), seconds)
    if code == 1 or code == -1:
        return Result(mutant, True, failed or ("(timeout)",), seconds)
    # Collection errors or a usage error: the mutant broke the import, not a rule's test.
    raise SystemExit(f"{mutant.name}: pytest exited {code} under the mutant:\n{tail}")


def baseline(mutants: tuple[Mutant, ...], scratch: Path) -> None:
    """Exit unless every listed test passes on the unchanged copy, in the leg it runs in."""
    for postgres in (False, True):
        tests = tuple(
            dict.fromkeys(
                test for mutant in mutants if mutant.postgres is postgres for test in mutant.tests
            )
        )
        if not tests:
            continue
        code, failed, tail = pytest(scratch, tests, postgres=postgres)
        if code != 0:
            raise SystemExit(
                f"the listed tests must pass on the unchanged tree (exit {code}; failed: "
                f"{', '.join(failed) or 'see below'}):\n{tail}"
            )


def table(results: list[Result]) -> str:
    """Return the results as a Markdown table with the totals under it."""
    lines = ["| rule | mutant | killed by | killed |", "|---|---|---|---|"]
    for result in results:
        killers = "<br>".join(f"`{test}`" for test in dict.fromkeys(map(short, result.killers)))
        lines.append(
            f"| {result.mutant.rule} | `{result.mutant.name}` | {killers or '—'} | "
            f"{'yes' if result.killed else '**no**'} |"
        )
    killed = sum(result.killed for result in results)
    seconds = sum(result.seconds for result in results)
    lines.append("")
    lines.append(
        f"{killed} of {len(results)} mutants killed by example tests; "
        f"{len(results) - killed} survived ({seconds:.0f} s of test runs)."
    )
    return "\n".join(lines)


def short(test: str) -> str:
    """Return a node id without its `tests/` prefix and its parameters, for the table."""
    return re.sub(r"\[.*\]$", "", test.removeprefix("tests/"))


def chosen(names: list[str] | None) -> tuple[Mutant, ...]:
    """Return the mutants named (all when none are); exit on an unknown name."""
    if not names:
        return MUTANTS
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"unknown mutants: {', '.join(unknown)} (see --list)")
    return tuple(known[name] for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that every mutant applies")
    parser.add_argument("--list", action="store_true", help="print the rules and mutants")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument(
        "--tests", nargs="+", metavar="NODE", help="run these tests instead of the listed ones"
    )
    arguments = parser.parse_args()
    mutants = chosen(arguments.only)
    if arguments.tests:
        mutants = tuple(
            Mutant(m.rule, m.name, m.path, m.before, m.after, tuple(arguments.tests))
            for m in mutants
        )
    if arguments.list:
        for mutant in mutants:
            print(f"{mutant.name:<36} {mutant.rule}  ({mutant.path})")
        return
    problems = check(mutants, ROOT)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(f"{len(problems)} mutants do not apply")
    if arguments.check:
        print(f"all {len(mutants)} mutants apply")
        return
    unrun = tuple(mutant for mutant in mutants if mutant.postgres and not postgres_url())
    mutants = tuple(mutant for mutant in mutants if mutant not in unrun)
    for mutant in unrun:
        print(f"not run  {mutant.name:<36} its rule is PostgreSQL's: set DATABASE_URL=postgres://…")
    # Stopped by a signal, the scratch copy is still removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped"))
    scratch = scratch_copy()
    try:
        started = time.perf_counter()
        baseline(mutants, scratch)
        print(f"baseline: the listed tests pass ({time.perf_counter() - started:.0f} s)")
        results = []
        for mutant in mutants:
            result = run(mutant, scratch)
            print(
                f"{'killed  ' if result.killed else 'SURVIVED'} {mutant.name:<36} "
                f"{result.seconds:5.1f} s  {', '.join(dict.fromkeys(map(short, result.killers)))}",
                flush=True,
            )
            results.append(result)
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)
    print()
    print(table(results))
    if unrun:
        print(f"{len(unrun)} not run: they need PostgreSQL ({', '.join(m.name for m in unrun)}).")
    if not all(result.killed for result in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
