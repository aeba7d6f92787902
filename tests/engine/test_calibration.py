"""Calibrating the byte estimator against reported usage: triggers move, limits never do."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloom.engine import (
    CalibratedEstimator,
    Calibration,
    ConfigurationError,
    ContextPolicy,
    EngineConfig,
    JsonBytesEstimator,
    ModelBudget,
    ModelGateway,
    O200kEstimator,
    calibration_config,
    estimator_named,
)
from agentloom.engine.testing import text_response, tool_call_response
from tests.engine.helpers import Recorder, make_engine

REAL = O200kEstimator()
ENGLISH = (
    "The quarterly report lists every shipment that left the northern warehouse, with its "
    "weight, its destination and the carrier that took it. "
)


class UsageDouble(ModelGateway):
    """A provider that reports each request's real o200k count as its prompt tokens.

    It refuses (fails the test) any request whose real count is above `limit`, as a provider
    would refuse a prompt longer than its window.
    """

    provider, model_id = "double", "o200k"

    def __init__(self, steps: list[str], limit: int | None = None):
        self.steps = list(steps)
        self.limit = limit
        self.real: list[int] = []

    def complete(self, request):
        real = REAL.estimate(request.messages, request.tools)
        if self.limit is not None:
            assert real <= self.limit, f"a request of {real} tokens reached the provider"
        self.real.append(real)
        usage = {"prompt_tokens": real, "completion_tokens": 5}
        if request.purpose == "compaction":
            return text_response("summary of the earlier work", usage=usage)
        if not self.steps:
            response = text_response("done", usage=usage)
        else:
            response = tool_call_response(("echo", {"text": self.steps.pop(0)}))
            response.usage = usage
        return response


def _calibrated_engine(double, *, budget=None, recorder=None):
    return make_engine(
        double,
        budget=budget or ModelBudget(400_000, 1_000, 0),
        recorder=recorder,
        config=EngineConfig(calibration={"samples": 5}),
    )


def test_the_calibrated_estimate_converges_on_the_reported_tokens_within_three_percent():
    double = UsageDouble([ENGLISH * (4 + n) for n in range(6)])
    recorder = Recorder()
    engine = _calibrated_engine(double, recorder=recorder)
    engine.start(run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None)
    estimates = [call.request_estimate for call in recorder.calls]
    # Uncalibrated at first: bytes over-count several times.
    assert estimates[0] > 3 * double.real[0]
    for estimate, real in list(zip(estimates, double.real, strict=True))[3:]:
        assert abs(estimate - real) / real <= 0.03, (estimate, real)
    # What each decision used is recorded with the call and in the checkpoint.
    assert recorder.calls[-1].calibration["ratio"] < 0.5
    assert recorder.calls[-1].calibration["base_tokens"] == double.real[-2]
    assert len(recorder.saves[-1]["state"]["calibration"]["samples"]) == 5
    assert len(estimates) == 7


def test_a_run_starts_from_the_ratio_its_connection_learned_and_keeps_it_in_the_checkpoint():
    double = UsageDouble([])
    recorder = Recorder()
    engine = _calibrated_engine(double, recorder=recorder)
    engine.start(
        run_number=1,
        attempt=1,
        system_prompt="sys",
        question=ENGLISH,
        history=None,
        calibration_start=0.25,
    )
    first = recorder.calls[0]
    assert (first.calibration["ratio"], first.calibration["base_tokens"]) == (0.25, None)
    assert first.request_estimate == round(0.25 * first.calibration["raw"])
    assert first.calibration["raw"] > JsonBytesEstimator().estimate(
        recorder.saves[0]["messages"], []
    )
    assert recorder.saves[0]["state"]["calibration"]["start"] == 0.25
    assert recorder.saves[0]["binding"]["calibration"] == {"samples": 5}


@pytest.mark.parametrize(
    "payload",
    [
        "数据仓库的每一批货物都记录了重量、目的地和承运人。" * 400,
        base64.b64encode(bytes(range(256)) * 40).decode(),
    ],
)
def test_a_ratio_learned_on_english_never_lets_an_over_budget_request_out(payload):
    budget = ModelBudget(12_000, 1_000, 0)
    double = UsageDouble([ENGLISH * 6, ENGLISH * 6, payload], limit=budget.effective_input_budget)
    recorder = Recorder()
    outcome = _calibrated_engine(double, budget=budget, recorder=recorder).start(
        run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None
    )
    # The learned English ratio is small; the hard check still measures raw bytes.
    assert recorder.calls[-1].calibration["ratio"] < 0.4
    assert all(real <= budget.effective_input_budget for real in double.real)
    assert outcome.status in ("succeeded", "failed")


def test_a_resumed_run_keeps_what_it_learned():
    double = UsageDouble([ENGLISH * 4, ENGLISH * 5])
    recorder = Recorder()
    engine = _calibrated_engine(double, recorder=recorder)
    engine.start(run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None)
    learned = recorder.saves[-1]["state"]["calibration"]["samples"]
    assert learned
    resumed_recorder = Recorder()
    again = UsageDouble([])
    resumed = make_engine(again, recorder=resumed_recorder).resume(
        {**recorder.saves[-1], "state": {**recorder.saves[-1]["state"], "terminal": None}},
        attempt=2,
    )
    assert resumed.status == "succeeded"
    # The engine was built without calibration; the checkpoint's binding brings it back.
    assert resumed_recorder.calls[0].calibration["ratio"] == pytest.approx(
        sorted(learned)[len(learned) // 2]
    )


def test_versions_without_calibration_measure_in_plain_bytes():
    double = UsageDouble([ENGLISH])
    recorder = Recorder()
    make_engine(double, recorder=recorder).start(
        run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None
    )
    assert all(call.calibration is None for call in recorder.calls)
    assert "calibration" not in recorder.saves[-1]["binding"]
    assert recorder.saves[-1]["state"]["calibration"] is None


def test_calibration_settings_are_validated():
    assert calibration_config(None) is None
    assert calibration_config({}) == {"samples": 5}
    for bad in ({"samples": 0}, {"samples": True}, {"ratio": 1}, []):
        with pytest.raises(ConfigurationError):
            calibration_config(bad)


def test_the_upper_bound_of_a_calibrated_estimator_is_the_raw_count():
    estimator = CalibratedEstimator(JsonBytesEstimator(), Calibration(start=0.2))
    messages = [{"role": "user", "content": ENGLISH * 10}]
    raw = JsonBytesEstimator().estimate(messages, [])
    assert estimator.upper_bound(messages, []) == raw
    assert estimator.estimate(messages, []) == round(0.2 * raw)
    assert estimator.binding() == JsonBytesEstimator().binding()


TEXTS = st.sampled_from(
    [
        ENGLISH,
        "数据仓库的每一批货物都记录了重量、目的地和承运人。",
        base64.b64encode(bytes(range(200))).decode(),
        json.dumps({"rows": [{"id": n, "v": n * 3.5} for n in range(20)]}),
        "def f(x):\n    return [y ** 2 for y in range(x)]\n",
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["bytes", "o200k", "calibrated"]),
    window=st.integers(min_value=3_000, max_value=20_000),
    pieces=st.lists(st.tuples(TEXTS, st.integers(1, 40)), min_size=1, max_size=6),
    start=st.none() | st.floats(min_value=0.05, max_value=1.0),
)
def test_no_request_above_the_real_budget_ever_reaches_the_provider(name, window, pieces, start):
    budget = ModelBudget(window, 500, 0)
    steps = [text * repeat for text, repeat in pieces]
    double = UsageDouble(steps, limit=budget.effective_input_budget)
    if name == "calibrated":
        engine = make_engine(
            double,
            budget=budget,
            policy=ContextPolicy(),
            config=EngineConfig(calibration={"samples": 3}),
        )
    else:
        engine = make_engine(double, budget=budget, estimator=estimator_named(name))
    outcome = engine.start(
        run_number=1,
        attempt=1,
        system_prompt="sys",
        question="go",
        history=None,
        **({"calibration_start": start} if name == "calibrated" else {}),
    )
    assert outcome.status in ("succeeded", "failed")


def test_a_calibrated_run_uses_the_window_and_a_resume_compacts_what_it_cannot_prove():
    budget = ModelBudget(20_000, 1_000, 0)
    steps = [ENGLISH * 14 for _ in range(12)]  # about 2,000 bytes and 400 tokens each
    double = UsageDouble(steps, limit=budget.effective_input_budget)
    recorder = Recorder()
    outcome = _calibrated_engine(double, budget=budget, recorder=recorder).start(
        run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None
    )
    assert outcome.status == "succeeded"
    final = outcome.frame
    raw = JsonBytesEstimator().estimate(final["messages"], [])
    # Far past the byte budget, yet every request was proven to fit and nothing compacted:
    # the reported prefix plus the bytes appended since bounds each one.
    assert raw > budget.effective_input_budget
    assert "compaction" not in [call.purpose for call in recorder.calls]
    assert max(double.real) < 0.5 * budget.effective_input_budget

    # Resumed, the first request extends the last reported one, which the checkpoint keeps (a
    # digest of its exact messages, tools and binding): it is proven to fit, nothing compacts.
    assert final["state"]["calibration"]["base"]["tokens"] == double.real[-1]
    again = UsageDouble([ENGLISH], limit=budget.effective_input_budget)
    resumed_recorder = Recorder()
    resumed = _calibrated_engine(again, budget=budget, recorder=resumed_recorder).resume(
        {**final, "state": {**final["state"], "terminal": None}}, attempt=2
    )
    assert resumed.status == "succeeded"
    assert resumed_recorder.calls[0].purpose == "action"
    assert resumed_recorder.calls[0].calibration["base_tokens"] == double.real[-1]

    # A request that does not start with exactly the reported messages (one byte differs) is
    # bounded by its raw size: too big to prove, so it compacts first.
    changed = json.loads(json.dumps(final))
    changed["state"]["terminal"] = None
    changed["messages"][0]["content"] += "!"
    other = UsageDouble([ENGLISH], limit=budget.effective_input_budget)
    other_recorder = Recorder()
    redone = _calibrated_engine(other, budget=budget, recorder=other_recorder).resume(
        changed, attempt=2
    )
    assert redone.status == "succeeded"
    assert other_recorder.calls[0].purpose == "compaction"


def test_a_resumed_run_measures_with_the_estimator_its_checkpoint_is_bound_to():
    double = UsageDouble([ENGLISH])
    recorder = Recorder()
    make_engine(double, recorder=recorder, estimator=estimator_named("o200k")).start(
        run_number=1, attempt=1, system_prompt="sys", question=ENGLISH, history=None
    )
    saved = recorder.saves[-1]
    assert saved["binding"]["estimator"]["module_id"] == O200kEstimator.module_id
    resumed_recorder = Recorder()
    # An engine built with bytes resumes it: the checkpoint's binding decides, so the run keeps
    # measuring in o200k tokens (the estimate equals the real count the double reports).
    again = UsageDouble([])
    make_engine(again, recorder=resumed_recorder).resume(
        {**saved, "state": {**saved["state"], "terminal": None}}, attempt=2
    )
    call = resumed_recorder.calls[0]
    assert call.estimator == O200kEstimator.module_id
    assert call.request_estimate == again.real[0]
