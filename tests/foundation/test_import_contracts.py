"""The import contracts see every module: packages are real, the private list is complete.

import-linter analyses only modules it can reach as packages, so a folder without `__init__.py`
would be skipped silently (ruff's INP rule refuses such a folder); and the contract that keeps the
apps on the engine's public surface lists the engine's private modules by name, so a new module
must join that list. The providers' surface is held for every app above the tool-server client.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agentloom", "context_app", "models_app", "sessions_app", "tests")


def _contracts() -> list[dict]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)["tool"]["importlinter"]["contracts"]


def _contract(name: str) -> dict:
    (contract,) = [c for c in _contracts() if c["name"] == name]
    return contract


def test_the_private_engine_modules_in_the_contract_are_the_files_on_disk():
    listed = set(_contract("the apps use the engine's public surface")["forbidden_modules"])
    engine_dir = ROOT / "agentloom" / "engine"
    on_disk = {f"agentloom.engine.{path.stem}" for path in engine_dir.glob("_*.py")}
    on_disk.discard("agentloom.engine.__init__")
    assert listed - {"agentloom.engine.testing"} == on_disk


def test_everything_above_the_providers_is_held_to_their_public_surface():
    contract = _contract("the apps use the providers' public surface")
    layers = _contract("apps are held in layers")["layers"]
    above = layers[: layers.index("agentloom.providers")]  # the apps and the tool-server client
    assert sorted(contract["source_modules"]) == sorted(above)
    assert contract["forbidden_modules"] == ["agentloom.providers.*"]


def test_the_engine_may_never_import_an_mcp_client():
    contract = _contract("the engine imports no MCP client")
    assert contract["source_modules"] == ["agentloom.engine"]
    assert "mcp" in contract["forbidden_modules"]


def test_every_folder_of_python_modules_is_a_package():
    missing = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            if not (path.parent / "__init__.py").exists():
                missing.append(str(path.parent.relative_to(ROOT)))
    assert sorted(set(missing)) == []


def test_a_forbidden_import_in_the_services_breaks_a_contract():
    """A probe module importing a private engine module from `sessions_app/services` is caught."""
    probe = ROOT / "sessions_app" / "services" / "_contract_probe.py"
    probe.write_text("from agentloom.engine import _frame  # noqa: F401\n")
    try:
        result = subprocess.run(
            [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()
    assert result.returncode != 0, result.stdout
    assert "the apps use the engine's public surface BROKEN" in result.stdout
