"""The integrity gate, per provider: what the engine sends always passes it, and a payload that
breaks a rule never reaches the gateway.

Random sessions (tool groups, failed calls, supplements, resumes, compactions, sub-agents, a
history made on one provider and continued on another) run through the real gateways' payloads;
every body is also checked by the provider doubles' own rules (`openai_contract`, and the
DeepSeek guide's reasoning rule in `deepseek_double`).
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloom.engine import EngineConfig, GatewayError, ModelBudget, ModelRequest, check_payload
from agentloom.engine._errors import PayloadRuleBroken
from agentloom.engine.testing import MemoryJournal, text_response, tool_call_response
from agentloom.providers import (
    DeepSeekChatGateway,
    ModelEndpoint,
    OpenAIChatGateway,
    OpenAICompatibleChatGateway,
)
from tests.engine.helpers import Recorder, make_engine
from tests.support.deepseek_double import missing_reasoning, thinking
from tests.support.openai_contract import ordering_violations

HELPER = {"name": "helper", "description": "d", "system_prompt": "Echo.", "tools": ["echo"]}
PROVIDERS = {
    "deepseek": DeepSeekChatGateway,
    "openai": OpenAIChatGateway,
    "openai_compatible": OpenAICompatibleChatGateway,
}


class Offline:
    """A provider's real gateway whose `complete` answers by a plan instead of over HTTP."""

    def __init__(self, provider: str, plan: list[str]):
        self.gateway = PROVIDERS[provider](ModelEndpoint("http://127.0.0.1:9/v1", "k", "m"))
        self.provider = provider
        self.plan = plan
        self.bodies: list[dict] = []
        self.gateway.complete = self.complete

    def problems(self, body: dict) -> list[str]:
        problems = ordering_violations(body["messages"])
        if self.provider == "deepseek":
            if thinking(body):
                problems += [f"no reasoning at {i}" for i in missing_reasoning(body["messages"])]
        elif any("reasoning_content" in m for m in body["messages"]):
            problems.append("reasoning sent to an OpenAI-family API")
        return problems

    def complete(self, request, stream=None):
        body = self.gateway.payload(request)
        assert not self.problems(body), self.problems(body)
        self.bodies.append(body)
        reply = self._reply(request)
        if self.provider == "deepseek" and thinking(body):
            reply.message["reasoning_content"] = f"thought {len(self.bodies)}"
        return reply

    def _reply(self, request):
        if request.purpose == "compaction":
            return text_response("summary NONCE-SUMMARY of the earlier work")
        if request.purpose == "verification":
            return text_response("PASS")
        if request.messages[-1].get("role") == "tool" or not self.plan:
            return text_response("done " + "a" * 100)
        step = self.plan.pop(0)
        if step == "boom":
            raise GatewayError("upstream", "the provider failed")
        if step == "delegate":
            return tool_call_response(("delegate_helper", {"task": "echo kid"}))
        if step == "two":
            return tool_call_response(("echo", {"text": "x" * 300}), ("fail", {"message": "no"}))
        if step == "answer":
            return text_response("answer " + "b" * 200)
        return tool_call_response(("echo", {"text": "c" * 400}))


STEPS = st.sampled_from(["echo", "two", "answer", "boom", "delegate"])
RUNS = st.lists(
    st.tuples(st.sampled_from(sorted(PROVIDERS)), st.lists(STEPS, min_size=1, max_size=4)),
    min_size=1,
    max_size=4,
)


def _session(runs, window: int, supplements: bool) -> list:
    journal = MemoryJournal()
    outcomes = []
    for number, (provider, plan) in enumerate(runs, start=1):
        offline = Offline(provider, list(plan))
        recorder = Recorder(journal=journal, run_id=number)
        queued = [[(f"s{number}", "a supplement NONCE-S")]] if supplements else []
        engine = make_engine(
            offline.gateway,
            tools=("echo", "fail"),
            budget=ModelBudget(window, 1_000, 0),
            policy={"model_steps": 3},
            recorder=recorder,
            config=EngineConfig(record_store=recorder.store(), sub_agents=(HELPER,)),
            supplements=lambda final, queued=queued: queued.pop() if queued else [],
        )
        outcome = engine.start(
            run_number=number,
            attempt=1,
            system_prompt="sys",
            question=f"question {number}",
            history=journal.history(),
        )
        if outcome.status == "failed":
            outcome = engine.resume(recorder.stored[-1], attempt=2)
        outcomes.append((outcome, offline))
    return outcomes


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=RUNS, window=st.sampled_from([9_000, 200_000]), supplements=st.booleans())
def test_every_payload_the_engine_sends_passes_its_providers_gate(runs, window, supplements):
    sent = 0
    for outcome, offline in _session(runs, window, supplements):
        assert "payload_rule_broken" not in (outcome.error or ""), outcome.error
        sent += len(offline.bodies)
        for body in offline.bodies:
            check_payload(body, offline.gateway.payload_rules, purpose="action", notes_placed=False)
    assert sent >= len(runs)


def _valid_body(provider: str) -> dict:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "thought",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "system", "content": "[run note] run 1 failed: x"},
        {"role": "assistant", "content": "a", "reasoning_content": "thought"},
        {"role": "user", "content": "next"},
    ]
    gateway = PROVIDERS[provider](ModelEndpoint("http://127.0.0.1:9/v1", "k", "m"))
    return gateway.payload(ModelRequest(purpose="action", messages=messages)), gateway


def _drop_result(body):
    del body["messages"][3]


def _duplicate_id(body):
    body["messages"].insert(4, copy.deepcopy(body["messages"][2]))
    body["messages"].insert(5, copy.deepcopy(body["messages"][3]))


def _note_as_user(body):
    body["messages"][4]["role"] = "user"


def _note_last(body):
    body["messages"].append({"role": "system", "content": "[run note] run 2 failed: y"})


def _wrong_limit(body):
    field = "max_tokens" if "max_tokens" in body else "max_completion_tokens"
    other = "max_completion_tokens" if field == "max_tokens" else "max_tokens"
    body[other] = body.pop(field)


def _reasoning_flip(body):
    assistant = body["messages"][2]
    if "reasoning_content" in assistant:
        del assistant["reasoning_content"]
    else:
        assistant["reasoning_content"] = "thought"


MUTATIONS = {
    "orphan_tool_message": _duplicate_id,
    "tool_call_order": _drop_result,
    "run_note_placement": _note_as_user,
    "output_limit_field": _wrong_limit,
    "reasoning": _reasoning_flip,
}


@settings(max_examples=40, deadline=None)
@given(
    provider=st.sampled_from(sorted(PROVIDERS)),
    mutation=st.sampled_from(sorted(MUTATIONS)),
    ends_with_note=st.booleans(),
)
def test_a_payload_that_breaks_a_rule_never_reaches_the_gateway(provider, mutation, ends_with_note):
    body, gateway = _valid_body(provider)
    check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
    broken = copy.deepcopy(body)
    (_note_last if ends_with_note else MUTATIONS[mutation])(broken)
    calls = []
    gateway.payload = lambda request: broken
    gateway.complete = lambda request: calls.append(request) or text_response("never")
    outcome = make_engine(gateway).start(run_number=1, attempt=1, system_prompt="sys", question="q")
    assert calls == []
    assert outcome.status == "failed"
    assert outcome.error.startswith("payload_rule_broken: ")
    with pytest.raises(PayloadRuleBroken):
        check_payload(broken, gateway.payload_rules, purpose="action", notes_placed=True)
