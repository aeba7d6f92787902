"""Liveness at the application level: random sessions through the real services.

`run_sequence(seed, user)` publishes an agent with every built-in tool and the researcher
sub-agent on a window drawn from the Demo agent's up to 128K, picks a summariser (the demo
model's, a verbose one, one that echoes its input, one that fails with 503 for a while), and
drives one session through a random sequence of steps: tool lines with small and large results,
failing tools, cancels during a model call (of an echo and of a sleep), supplements, resumes after
`worker_lost` and after a failed compaction, delegations, plan updates, questions near the door
limit and view revocations. Plain questions are asked at random points and at the end.

What it checks is returned as a `Report` (the test asserts it, `bench/liveness.py` counts it):

- every probe (a plain question) succeeds, with the failing summariser once it has recovered;
- no request reaches the provider over the effective budget, counted by the double's own
  tokenizer (words and punctuation marks, not the estimator under test);
- the journal holds every accepted question and supplement exactly once;
- replaying the last run matches what was recorded.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentloom.engine import (
    BUILTIN_TOOL_NAMES,
    GatewayError,
    JsonBytesEstimator,
    LocalDemoGateway,
    ModelBudget,
    ModelGateway,
    ModelRequest,
    ModelResponse,
)
from agentloom.engine.testing import text_response
from context_app import engine_adapter
from context_app.services.agents import agent_create, agent_publish
from sessions_app.demo import DEMO_CONTEXT_WINDOW, DEMO_SUB_AGENTS
from sessions_app.models import Run, SessionMessage, SessionView
from sessions_app.selectors.checkpoints import frame_of
from sessions_app.services.execution import run_execute
from sessions_app.services.replay import replay_run
from sessions_app.services.reusable_views import view_revoke
from sessions_app.services.runs import (
    run_ask,
    run_cancel,
    run_resume,
    session_create,
    supplement_add,
    sweep_expired_leases,
)
from tests.factories import make_connection, make_space

WINDOWS = (DEMO_CONTEXT_WINDOW, 16_384, 32_768, 131_072)
SUMMARISERS = ("demo", "verbose", "echo", "failing")
STEPS = (
    "small",
    "large",
    "fail",
    "cancel_call",
    "cancel_sleep",
    "supplement",
    "worker_lost",
    "delegate",
    "plan",
    "long",
    "revoke",
    "probe",
)
_TOKEN = re.compile(r"\w+|[^\w\s]")


def own_tokens(request: ModelRequest) -> int:
    """Count a request with the double's own tokenizer: words and punctuation marks."""
    body = json.dumps({"messages": request.messages, "tools": request.tools}, ensure_ascii=False)
    return len(_TOKEN.findall(body))


class LivenessGateway(ModelGateway):
    """The demo model, with a summariser of its own kind and hooks run inside the next call."""

    provider = "local"
    model_id = "local-demo"

    def __init__(self, summariser: str, effective: int, failures: int = 0):
        self.demo = LocalDemoGateway()
        self.summariser = summariser
        self.effective = effective
        self.failures = failures  # compaction calls that still fail with 503
        self.during_call: list = []
        self.largest = 0
        self.over_budget = 0
        self.calls = Counter()

    def complete(self, request: ModelRequest) -> ModelResponse:
        size = own_tokens(request)
        self.largest = max(self.largest, size)
        if size > self.effective:
            self.over_budget += 1
        self.calls[request.purpose] += 1
        hooks, self.during_call = self.during_call, []
        for hook in hooks:
            hook()
        if request.purpose != "compaction" or self.summariser == "demo":
            return self.demo.complete(request)
        if self.summariser == "failing" and self.failures > 0:
            self.failures -= 1
            raise GatewayError("upstream", "The model provider failed.", status=503)
        if self.summariser == "failing":
            return self.demo.complete(request)
        shown = "\n".join(str(m.get("content")) for m in request.messages[1:])
        if self.summariser == "verbose":
            return text_response(f"In great detail: {shown}\n" + "and so on, at length. " * 200)
        return text_response(shown)  # echo: repeats its whole input


@dataclass
class Report:
    seed: int
    window: int
    summariser: str
    steps: list[str] = field(default_factory=list)
    probes: int = 0
    dead_probes: list[str] = field(default_factory=list)
    failed_runs: Counter = field(default_factory=Counter)
    stages: Counter = field(default_factory=Counter)
    summary_calls: list[int] = field(default_factory=list)
    wasted_calls: int = 0
    view_shares: list[float] = field(default_factory=list)
    over_budget: int = 0
    largest_request: int = 0
    journal_problems: list[str] = field(default_factory=list)
    replay_ok: bool = True

    @property
    def alive(self) -> bool:
        return not self.dead_probes

    def problems(self) -> list[str]:
        found = [f"probe failed: {p}" for p in self.dead_probes]
        if self.over_budget:
            found.append(f"{self.over_budget} request(s) over the effective budget")
        found += self.journal_problems
        if not self.replay_ok:
            found.append("replay of the last run differs")
        return found


class _Session:
    def __init__(self, rng: random.Random, user, seed: int):
        self.rng, self.user = rng, user
        window = rng.choice(WINDOWS)
        summariser = rng.choice(SUMMARISERS)
        self.report = Report(seed=seed, window=window, summariser=summariser)
        space = make_space(name=f"Liveness {seed}", admin=user)
        connection = make_connection(
            space,
            context_window=window,
            max_output_tokens=512 if window == DEMO_CONTEXT_WINDOW else 2_048,
            safety_margin_tokens=256,
        )
        agent = agent_create(
            user=user,
            space=space,
            name="Live",
            system_prompt="You are the AgentLoom demo agent. Use the tools when asked.",
            model_connection=connection.pk,
            tools=list(BUILTIN_TOOL_NAMES),
            sub_agents=DEMO_SUB_AGENTS,
        )
        self.version = agent_publish(user=user, agent=agent)
        self.session = session_create(user=user, agent_version=self.version)
        self.budget = ModelBudget.from_dict(self.version.snapshot["budget"])
        self.gateway = LivenessGateway(
            summariser, self.budget.effective_input_budget, failures=rng.randint(1, 4)
        )
        self.asked: list[str] = []
        self.supplements: list[str] = []
        self.runs: list[Run] = []
        self.counter = 0

    # -- one run ---------------------------------------------------------------------------

    def nonce(self) -> str:
        self.counter += 1
        return f"NONCE-{self.report.seed}-{self.counter}"

    def execute(self, question: str, *, during=None) -> Run:
        run = run_ask(user=self.user, session=self.session, question=question)
        self.asked.append(question)
        if during is not None:
            self.gateway.during_call.append(lambda: during(run))
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        self.runs.append(run)
        return run

    def resume(self, run: Run) -> Run:
        run = run_resume(user=self.user, run=run)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        return run

    def settle(self, run: Run) -> Run:
        """Resume a run that failed because the summariser was down, as a user would."""
        for _ in range(6):
            if run.status != Run.Status.FAILED or run.error == "worker_lost":
                return run
            run = self.resume(run)
        return run

    # -- steps -----------------------------------------------------------------------------

    def step(self, name: str) -> None:
        self.report.steps.append(name)
        getattr(self, f"do_{name}")()

    def do_small(self) -> None:
        line = self.rng.choice(
            [
                f'/tool echo {{"text": "{self.nonce()} remember me"}}',
                '/tool calculator {"expression": "(2+3)*7"}',
                "/tool current_time {}",
            ]
        )
        self.settle(self.execute(line))

    def do_large(self) -> None:
        chars = self.rng.choice([1_500, 6_000, 30_000, 120_000])
        self.settle(self.execute(f'/tool big_output {{"chars": {chars}}}'))

    def do_fail(self) -> None:
        self.settle(self.execute(f'/tool fail {{"message": "boom {self.nonce()}"}}'))

    def do_cancel_call(self) -> None:
        def cancel(run):
            run_cancel(user=self.user, run=Run.objects.get(pk=run.pk))

        self.execute(f'/tool echo {{"text": "{self.nonce()}"}}', during=cancel)

    def do_cancel_sleep(self) -> None:
        def cancel(run):
            run_cancel(user=self.user, run=Run.objects.get(pk=run.pk))

        self.execute('/tool sleep {"seconds": 5}', during=cancel)

    def do_supplement(self) -> None:
        text = f"{self.nonce()} also consider this"

        def supplement(run):
            supplement_add(user=self.user, run=Run.objects.get(pk=run.pk), text=text)
            self.supplements.append(text)

        self.settle(self.execute('/tool sleep {"seconds": 0}', during=supplement))

    def do_worker_lost(self) -> None:
        def lose(run):
            Run.objects.filter(pk=run.pk).update(lease_owner="another-worker")

        run = self.execute(f'/tool echo {{"text": "{self.nonce()}"}}', during=lose)
        Run.objects.filter(pk=run.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
        sweep_expired_leases(session=self.session)
        run.refresh_from_db()
        self.settle(self.resume(run))

    def do_delegate(self) -> None:
        task = json.dumps({"task": f'/tool echo {{"text": "{self.nonce()}"}}'})
        self.settle(self.execute(f"/tool delegate_researcher {task}"))

    def do_plan(self) -> None:
        steps = [{"step": f"step {n} of {self.nonce()}", "status": "pending"} for n in range(3)]
        self.settle(self.execute(f"/tool update_plan {json.dumps({'steps': steps})}"))

    def do_long(self) -> None:
        limit = engine_adapter.input_check(self.version, "").limit
        words = f"{self.nonce()} " + "a long question with plain words " * (limit // 30)
        while engine_adapter.input_check(self.version, words).size > limit:
            words = words[: int(len(words) * 0.9)]
        self.settle(self.execute(words.strip()))

    def do_revoke(self) -> None:
        view = SessionView.objects.filter(session=self.session, revoked_at__isnull=True).last()
        if view is not None:
            view_revoke(user=self.user, session=self.session, revision=view.revision)

    def do_probe(self) -> None:
        question = f"What do you remember? {self.nonce()}"
        run = self.settle(self.execute(question))
        self.report.probes += 1
        if run.status != Run.Status.SUCCEEDED:
            self.report.dead_probes.append(f"{run.status}: {run.error}")

    # -- checks ----------------------------------------------------------------------------

    def collect(self) -> Report:
        report = self.report
        report.over_budget = self.gateway.over_budget
        report.largest_request = self.gateway.largest
        effective = self.budget.effective_input_budget
        estimator = JsonBytesEstimator()
        for run in Run.objects.filter(session=self.session).order_by("number"):
            if run.status == Run.Status.FAILED:
                report.failed_runs[(run.error or "").split(":")[0]] += 1
            frame = frame_of(run)
            if frame is None:
                continue
            size = estimator.upper_bound(frame.messages, [])
            report.view_shares.append(size / effective)
            for row in frame.state.compaction_log:
                stage = row.get("stage") or "summary"
                report.stages[f"{stage}:{row.get('outcome')}"] += row.get("repeats", 1)
                if stage == "summary" and row.get("outcome") == "succeeded":
                    report.summary_calls.append(row.get("calls") or 0)
                elif row.get("outcome") == "failed":
                    report.wasted_calls += row.get("calls") or 0
        report.wasted_calls += self.discarded_calls()
        self.check_journal()
        last = Run.objects.filter(session=self.session).order_by("-number").first()
        if last is not None and self.rng.random() < 0.5:
            report.replay_ok = replay_run(last).ok
        return report

    def discarded_calls(self) -> int:
        from sessions_app.models import ModelCall

        return ModelCall.objects.filter(run__session=self.session, discarded=True).count()

    def check_journal(self) -> None:
        rows = SessionMessage.objects.filter(session=self.session, instance="main")
        questions = Counter(
            str(row.message.get("content")) for row in rows if row.kind == "user_input"
        )
        supplements = Counter(
            str(row.message.get("content")) for row in rows if row.kind == "supplement"
        )
        for question, times in Counter(self.asked).items():
            if questions[question] != times:
                self.report.journal_problems.append(
                    f"question asked {times} times journaled {questions[question]} times: "
                    f"{question[:40]}"
                )
        for text in self.supplements:
            if supplements[text] != 1:
                self.report.journal_problems.append(
                    f"supplement journaled {supplements[text]} times: {text[:40]}"
                )


def run_sequence(seed: int, user, *, length: int | None = None) -> Report:
    """Drive one random session (see the module docstring) and return what was found."""
    rng = random.Random(seed)
    session = _Session(rng, user, seed)
    engine_adapter.set_gateway_factory(lambda version, connection: session.gateway)
    try:
        for _ in range(length or rng.randint(4, 10)):
            session.step(rng.choice(STEPS))
        session.step("probe")
        return session.collect()
    finally:
        engine_adapter.set_gateway_factory(None)


def summarise(reports: list[Report]) -> dict[str, Any]:
    """Return the figures `bench/liveness.py` prints."""
    shares = sorted(share for r in reports for share in r.view_shares)
    calls = sorted(c for r in reports for c in r.summary_calls)
    return {
        "sequences": len(reports),
        "alive": sum(r.alive for r in reports),
        "probes": sum(r.probes for r in reports),
        "failed_runs": sum((r.failed_runs for r in reports), Counter()),
        "stages": sum((r.stages for r in reports), Counter()),
        "calls_per_summary": (sum(calls) / len(calls)) if calls else 0.0,
        "max_calls_per_summary": calls[-1] if calls else 0,
        "wasted_calls": sum(r.wasted_calls for r in reports),
        "over_budget": sum(r.over_budget for r in reports),
        "median_view_share": shares[len(shares) // 2] if shares else 0.0,
        "worst_view_share": shares[-1] if shares else 0.0,
        "problems": [(r.seed, p) for r in reports for p in r.problems()],
    }
