"""The engine's public surface: one `__all__`, internal modules underscored, test doubles apart."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import agentloom.engine as engine
from agentloom.engine import (
    BudgetCompactionPolicy,
    ConfigurationError,
    ContextBinding,
    ContextManager,
    ContextOptions,
    ContextPolicy,
    EngineConfig,
    EngineHooks,
    JournalContextManager,
    JsonBytesEstimator,
    ModelBudget,
    ProjectedHistory,
    SubAgent,
    create_engine,
)
from agentloom.engine._engine import CONTEXT_MANAGER_OPTIONS, DEFAULT_MAX_MODEL_CALLS
from agentloom.engine._rendering import CURRENT_RENDERING
from agentloom.engine.testing import ScriptedGateway, text_response
from tests.engine.helpers import FakeClock

ENGINE_DIR = Path(engine.__file__).parent
BUDGET = ModelBudget(32_768, 4_096, 1_024)
# The legacy policy (None) and BUDGET.
BINDING = ContextBinding(None, BUDGET)


def test_the_public_names_are_listed_once_and_all_resolve():
    names = engine.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(engine, name) is not None, name


def test_every_engine_module_but_the_package_and_testing_is_internal():
    public = {"__init__", "testing"}
    modules = {path.stem for path in ENGINE_DIR.glob("*.py")}
    assert public <= modules
    assert [name for name in modules - public if not name.startswith("_")] == []


def test_the_test_doubles_are_outside_the_public_surface():
    for name in (
        "ScriptedGateway",
        "ScriptExhausted",
        "MemoryJournal",
        "history_trial",
        "text_response",
        "tool_call_response",
    ):
        assert name not in engine.__all__
        assert not hasattr(engine, name)
    # The demo model is product code and stays public.
    assert "LocalDemoGateway" in engine.__all__


def test_create_engine_takes_three_positional_arguments_hooks_and_config():
    parameters = inspect.signature(create_engine).parameters
    positional = [p.name for p in parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p.name for p in parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert positional == ["gateway", "tools", "binding"]
    # The engine's two replaceable parts (context manager, compaction) stay keywords of their own.
    assert keyword == ["hooks", "config", "context_manager", "compaction_policy"]
    engine_parameters = set(inspect.signature(engine.Engine).parameters)
    assert engine_parameters == {"gateway", "tools", "binding", "hooks", "config"}


def test_a_binding_takes_a_policy_and_a_budget_as_objects_or_dicts():
    binding = ContextBinding({"context_ratio": 0.7}, BUDGET.to_dict(), large_records={})
    assert binding.policy == ContextPolicy(context_ratio=0.7) and binding.budget == BUDGET
    assert binding.large_records is not None and binding.large_records.share > 0
    assert type(ContextBinding(None, BUDGET).policy).__name__ == "LegacyCharPolicy"
    with pytest.raises(ConfigurationError, match="binding"):
        create_engine(ScriptedGateway(), ["echo"], {"policy": None, "budget": BUDGET.to_dict()})


def _long_history(pairs: int = 8) -> ProjectedHistory:
    messages = []
    for n in range(pairs):
        messages.append({"role": "user", "content": f"question {n} " + "f" * 600})
        messages.append({"role": "assistant", "content": f"answer {n}"})
    return ProjectedHistory(messages=messages, watermark=2 * pairs, user_turns=pairs)


def test_create_engine_accepts_context_manager_and_compaction_policy(scripted):
    managers = []
    attempts = []

    class CountingContext(JournalContextManager):
        def __init__(self, **options):
            super().__init__(**options)
            managers.append(self)

    class RefusingPolicy(BudgetCompactionPolicy):
        def compact(self, request):
            attempts.append(request)
            outcome = super().compact(request)
            return dataclasses.replace(
                outcome, outcome="failed", reason="refused_by_policy", messages=None
            )

    refusing = RefusingPolicy()
    built = create_engine(
        scripted(text_response("summary NONCE-S"), text_response("answer")),
        ["echo"],
        ContextBinding(ContextPolicy(), ModelBudget(8_000, 1_000, 0)),
        context_manager=CountingContext,
        compaction_policy=refusing,
    )
    assert (built.config.context_manager, built.config.compaction_policy) == (
        CountingContext,
        refusing,
    )
    outcome = built.start(
        run_number=1, attempt=1, system_prompt="sys", question="q", history=_long_history()
    )
    # The run's context was kept by the given manager and compacted by the given policy, whose
    # refusal kept the old view.
    assert outcome.status == "succeeded"
    assert len(managers) == 1 and attempts
    log = outcome.frame["state"]["compaction_log"]
    assert [entry["reason"] for entry in log] == ["refused_by_policy"]
    assert outcome.frame["context"]["compactions"] == []


def _concrete_manager_without_options() -> type[ContextManager]:
    """Return a ContextManager subclass with every method but no constructor options."""
    methods = {
        name: lambda self, *args, **kwargs: None for name in ContextManager.__abstractmethods__
    }
    return type("Bare", (ContextManager,), methods)


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        (
            lambda: JournalContextManager(ContextBinding(ContextPolicy(), BUDGET)),
            "pass its class",
        ),
        (_concrete_manager_without_options, "does not take them"),
        (lambda: type("Abstract", (ContextManager,), {}), "abstract"),
        (lambda: "JournalContextManager", "not callable"),
    ],
    ids=["instance", "no-options", "abstract", "not-callable"],
)
def test_a_context_manager_that_is_not_a_factory_is_refused_at_construction(factory, says):
    with pytest.raises(ConfigurationError) as refused:
        create_engine(ScriptedGateway(), ["echo"], BINDING, context_manager=factory())
    assert refused.value.field == "context_manager"
    message = str(refused.value)
    assert says in message and "JournalContextManager" in message, message
    with pytest.raises(ConfigurationError, match="context_manager"):
        EngineConfig(context_manager=factory())


def test_the_factory_options_are_what_each_instance_is_built_with(scripted):
    given = []

    def factory(**options):
        given.append(set(options))
        return JournalContextManager(**options)

    built = create_engine(
        scripted(text_response("answer")), ["echo"], BINDING, context_manager=factory
    )
    built.start(run_number=1, attempt=1, system_prompt="sys", question="q")
    assert given == [set(CONTEXT_MANAGER_OPTIONS)]


def readme_engine_example() -> str:
    """Return the Python block of README's engine section (the one that calls create_engine)."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    [block] = [block for block in blocks if "create_engine(" in block]
    return block


def test_readme_engine_example_runs_as_written(capsys):
    exec(compile(readme_engine_example(), "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("action ") and printed[-1] == "succeeded Paris."


def test_a_keyword_may_fill_the_config_but_never_contradict_it():
    policy = BudgetCompactionPolicy()
    config = EngineConfig(compaction_policy=policy)
    same = create_engine(
        ScriptedGateway(), ["echo"], BINDING, config=config, compaction_policy=policy
    )
    assert same.config.compaction_policy is policy
    with pytest.raises(TypeError, match="compaction_policy"):
        create_engine(
            ScriptedGateway(),
            ["echo"],
            BINDING,
            config=config,
            compaction_policy=BudgetCompactionPolicy(),
        )


def test_hooks_and_config_default_to_an_engine_that_keeps_nothing():
    built = create_engine(
        ScriptedGateway(),
        ["echo"],
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 1_024)),
    )
    assert built.hooks == EngineHooks()
    assert built.binding.estimator.binding() == JsonBytesEstimator().binding()
    assert (built.binding.large_records, built.binding.rendering.version) == (
        None,
        CURRENT_RENDERING,
    )
    config = built.config
    assert config.limits.max_model_calls == DEFAULT_MAX_MODEL_CALLS
    assert config.context_manager is JournalContextManager
    assert (config.record_store, config.sub_agents, config.secrets) == (None, (), ())


def test_the_config_accepts_sub_agents_as_dicts_and_secrets_as_any_iterable():
    config = EngineConfig(
        sub_agents=[
            {"name": "helper", "description": "d", "system_prompt": "Help.", "tools": ["echo"]}
        ],
        secrets=["sk-NONCE-1"],
    )
    [helper] = config.sub_agents
    assert isinstance(helper, SubAgent)
    assert helper.name == "helper"
    assert config.secrets == ("sk-NONCE-1",)


def test_a_context_manager_says_whether_it_holds_a_frame():
    context = JournalContextManager(
        ContextBinding(ContextPolicy(), ModelBudget(32_768, 4_096, 1_024)),
        ContextOptions(clock=FakeClock()),
    )
    assert not context.opened
    context.create(instance="main", system_prompt="s", task="t", run_number=1, attempt=1)
    assert context.opened
    assert context.frame.instance == "main"
