"""Liveness is an invariant: random sessions through the real services stay answerable.

The sequences come from `tests.support.liveness` (see its docstring for the steps and checks);
hypothesis draws the seeds, derandomized, so a failure names a seed that reproduces it.
"""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.liveness import run_sequence


def _check(seed, user):
    report = run_sequence(seed, user)
    assert report.probes >= 1
    assert report.problems() == [], (seed, report.window, report.summariser, report.steps)


@pytest.mark.slow
@pytest.mark.django_db(transaction=False)
def test_random_sessions_stay_alive(alice):
    # 100 seeded sequences on SQLite, 20 on PostgreSQL (the leg's database is slower).
    examples = 20 if connection.vendor == "postgresql" else 100
    seeds = []

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.integers(min_value=0, max_value=2**31))
    def sequences(seed):
        seeds.append(seed)
        _check(seed, alice)

    sequences()
    assert len(set(seeds)) >= examples, "every sequence was a distinct seed"


def test_a_few_random_sessions_stay_alive(alice):
    # 676: found by bench/liveness.py (a run compacted in its resumed attempt; replay resumed it
    # from a self-contained frame and lost where its history came from).
    for seed in (1, 2, 3, 676):
        _check(seed, alice)


def test_after_a_run_compaction_could_not_save_the_next_run_starts_from_a_view_that_fits(alice):
    from context_app import engine_adapter
    from sessions_app.models import Run
    from tests.factories import ask
    from tests.sessions_app.test_walkthrough import demo_session
    from tests.support.liveness import LivenessGateway

    session = demo_session(alice)
    budget = session.agent_version.snapshot["budget"]
    effective = budget["context_window"] - budget["max_output_tokens"]
    effective -= budget["safety_margin_tokens"]
    provider = LivenessGateway("failing", effective, failures=10**6)  # down until told otherwise
    engine_adapter.set_gateway_factory(lambda version, connection: provider)
    try:
        runs = []
        while len(runs) < 12 and not any(r.status == Run.Status.FAILED for r in runs):
            runs.append(ask(session, alice, '/tool big_output {"chars": 30000}'))
        failed = [run for run in runs if run.status == Run.Status.FAILED]
        assert failed, "with the summariser down, a run had to stop"
        assert all("(compaction failed: gateway_error: upstream)" in r.error for r in failed)

        provider.failures = 0  # the summariser recovers
        answered = ask(session, alice, "What did the tools return?")
    finally:
        engine_adapter.set_gateway_factory(None)
    assert answered.status == Run.Status.SUCCEEDED, answered.error
    assert provider.over_budget == 0
