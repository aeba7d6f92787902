"""Every rule findable in the repository itself.

A rule is stated where it lives (its module's docstring, the contract's comment), so no comment or
docstring cites a document outside the repository (a section of a design note the repository does
not hold). A package of services or selectors is a map: its `__init__` docstring names each of its
modules with what it holds, so a newcomer finds a rule's module from there.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("agentloom", "bench", "context_app", "models_app", "sessions_app", "static", "templates")
SUFFIXES = {".py", ".toml", ".js", ".html", ".css"}
# A section sign, or the design note named by its file.
CITATION = re.compile(r"\u00a7|DESIGN\.md")
MAPS = (
    "agentloom.spaces.services",
    "context_app.services",
    "models_app.admin",
    "models_app.services",
    "sessions_app.selectors",
    "sessions_app.services",
)


def _sources() -> list[Path]:
    paths = [ROOT / "pyproject.toml", *(ROOT / "tests").rglob("*.py")]
    for folder in FOLDERS:
        paths.extend(path for path in (ROOT / folder).rglob("*") if path.suffix in SUFFIXES)
    return [path for path in paths if path != Path(__file__).resolve()]


def test_no_source_cites_a_document_outside_the_repository():
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if CITATION.search(line)
    ]
    assert cited == []


@pytest.mark.parametrize("name", MAPS)
def test_a_package_map_names_each_of_its_modules(name):
    package = importlib.import_module(name)
    modules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    mapped = set(re.findall(r"^- `(\w+)`:", package.__doc__ or "", re.MULTILINE))
    assert mapped == modules
