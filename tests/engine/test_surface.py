"""The engine's public surface: one `__all__`, internal modules underscored, test doubles apart."""

from __future__ import annotations

import inspect
from pathlib import Path

import agentloom.engine as engine
from agentloom.engine import (
    ContextPolicy,
    EngineConfig,
    EngineHooks,
    JournalContextManager,
    JsonBytesEstimator,
    ModelBudget,
    SubAgent,
    create_engine,
)
from agentloom.engine.testing import ScriptedGateway
from tests.engine.helpers import FakeClock

ENGINE_DIR = Path(engine.__file__).parent


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
    for name in ("ScriptedGateway", "ScriptExhausted", "MemoryJournal", "history_trial"):
        assert name not in engine.__all__
        assert not hasattr(engine, name)
    # The demo model is product code and stays public.
    assert "LocalDemoGateway" in engine.__all__


def test_create_engine_takes_four_positional_arguments_hooks_and_config():
    parameters = inspect.signature(create_engine).parameters
    positional = [p.name for p in parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p.name for p in parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert positional == ["gateway", "tools", "policy", "budget"]
    assert keyword == ["hooks", "config"]
    engine_parameters = set(inspect.signature(engine.Engine).parameters)
    assert engine_parameters == {"gateway", "tools", "policy", "budget", "hooks", "config"}


def test_hooks_and_config_default_to_an_engine_that_keeps_nothing():
    built = create_engine(
        ScriptedGateway(), ["echo"], ContextPolicy(), ModelBudget(32_768, 4_096, 1_024)
    )
    assert built.hooks == EngineHooks()
    config = built.config
    assert config.estimator.binding() == JsonBytesEstimator().binding()
    assert config.limits.max_model_calls == engine.DEFAULT_MAX_MODEL_CALLS
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
        policy=ContextPolicy(), budget=ModelBudget(32_768, 4_096, 1_024), clock=FakeClock()
    )
    assert not context.opened
    context.create(instance="main", system_prompt="s", task="t", run_number=1, attempt=1)
    assert context.opened
    assert context.frame.instance == "main"
