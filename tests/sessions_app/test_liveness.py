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
    for seed in (1, 2, 3):
        _check(seed, alice)
