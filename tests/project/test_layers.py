"""The import contract of docs/architecture.md: arvis's layers import downward only.

Every ``import`` / ``from … import`` in ``arvis/`` (module level or inside functions, ``TYPE_CHECKING``
blocks included) and every ``importlib.import_module("literal")`` is read with :mod:`ast` and checked
against :data:`LAYERS`. Violations the tree has today are listed, by name and with the issue that removes
them, in :data:`KNOWN_VIOLATIONS`; an entry that no longer matches anything fails the test too, so the
list only ever shrinks (delete an entry when its fix lands).

The tests follow the same layers: one folder of tests/ per layer (:data:`TEST_FOLDERS`), checked here too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import REPO_ROOT as ROOT

PACKAGE = ROOT / "arvis"


@dataclass(frozen=True)
class Layer:
    """Packages (or modules) of one layer. ``independent``: its members do not import each other."""

    name: str
    members: tuple[str, ...]
    independent: bool = False


# Top first. A module may import its own layer (unless the layer is independent) and every layer below.
LAYERS = (
    Layer("entry points", ("arvis.cli", "arvis.demo", "arvis.__main__")),
    Layer("applications", ("arvis.eval", "arvis.training"), independent=True),
    Layer("command line", ("arvis.cli_args",)),
    Layer("pipelines", ("arvis.pipelines",)),
    Layer("hub", ("arvis.hub", "arvis.families", "arvis.weights")),
    Layer("methods", ("arvis.methods",)),
    Layer("drafting", ("arvis.drafting",)),
    Layer("engine", ("arvis.engine",)),
    Layer("models", ("arvis.models", "arvis.tokenizers")),
    Layer("foundations", ("arvis.acceptance", "arvis.data"), independent=True),
    Layer("utils", ("arvis.utils", "arvis.errors")),
)
# Top-level folders of the repository that are scripts and apps, never a dependency of the library.
OUTSIDE = ("apps", "eval")
# The acceptance rules are pure tensor math: no I/O, no model libraries.
ACCEPTANCE_FORBIDDEN = ("os", "io", "pathlib", "shutil", "json", "pickle", "subprocess", "socket", "urllib",
                        "requests", "safetensors", "transformers", "diffusers", "huggingface_hub", "accelerate",
                        "PIL", "gradio", "open_clip", "cleanfid")

# name -> (why it is allowed for now, the (importer, imported) pairs it covers)
KNOWN_VIOLATIONS: dict[str, tuple[str, frozenset[tuple[str, str]]]] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> tuple[int, Layer, str] | None:
    """(layer index, layer, member) of an arvis module; None for the root package ``arvis`` (a lazy facade)."""
    for index, layer in enumerate(LAYERS):
        for member in layer.members:
            if module == member or module.startswith(member + "."):
                return index, layer, member
    return None


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """``(imported module, line)`` of every import in ``source`` (relative imports resolved)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from arvis.eval import fid`: the submodule is the dependency, not the package's __init__.
            submodules = [f"{target}.{alias.name}" for alias in node.names
                          if (ROOT / Path(*f"{target}.{alias.name}".split("."))).with_suffix(".py").exists()]
            found += [(name, node.lineno) for name in submodules]
            if len(submodules) < len(node.names):
                found.append((target, node.lineno))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                found.append((str(node.args[0].value), node.lineno))
            if name == "spec_from_file_location":  # code loaded by file path: a hidden import
                found.append(("<spec_from_file_location>", node.lineno))
    return found


def violations_in(source: str, module: str, is_package: bool = False) -> list[tuple[str, str, int, str]]:
    """``(importer, imported, line, rule)`` for every import of ``source`` that breaks the contract."""
    found = []
    here = layer_of(module)
    for target, line in imports_of(source, module, is_package):
        top = target.split(".")[0]
        if top in OUTSIDE or target == "<spec_from_file_location>":
            found.append((module, target, line, f"arvis never imports the repository's {top}/ folder"))
            continue
        if module.startswith("arvis.acceptance") and top in ACCEPTANCE_FORBIDDEN:
            found.append((module, target, line, "acceptance is pure tensor math (no I/O, no model libraries)"))
            continue
        there = layer_of(target) if top == "arvis" else None
        if here is None or there is None:
            continue
        (i, layer, member), (j, _, other) = here, there
        if j < i:
            found.append((module, target, line, f"{layer.name} ({member}) may not import the higher layer of {other}"))
        elif j == i and layer.independent and member != other:
            found.append((module, target, line, f"{member} and {other} are independent members of {layer.name}"))
    return found


def tree_violations() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if not all(part.isidentifier() for part in module_name(path).split(".")):
            # Not an importable module: a shipped model folder's pipeline.py (arvis/weights/llamagen-c2i-photos/),
            # which diffusers' custom-pipeline loader runs from the folder, outside the package's layers.
            continue
        found += violations_in(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
    return found


def test_arvis_imports_follow_the_layers():
    found = tree_violations()
    allowed = {pair: name for name, (_, pairs) in KNOWN_VIOLATIONS.items() for pair in pairs}
    new = [f"{m}:{line} imports {t}: {rule}" for m, t, line, rule in found if (m, t) not in allowed]
    assert not new, "imports that break docs/architecture.md's layers:\n" + "\n".join(new)
    seen = {(m, t) for m, t, _, _ in found}
    stale = sorted(f"{name}: {pair}" for pair, name in allowed.items() if pair not in seen)
    assert not stale, "fixed — delete from KNOWN_VIOLATIONS:\n" + "\n".join(stale)


def test_every_arvis_package_has_a_layer():
    packages = {module_name(p.parent) for p in PACKAGE.rglob("__init__.py")} - {"arvis"}
    modules = {module_name(p) for p in PACKAGE.glob("*.py")} - {"arvis"}
    missing = sorted(m for m in packages | modules if layer_of(m) is None)
    assert not missing, f"give these a layer in LAYERS (and in docs/architecture.md): {missing}"


@pytest.mark.parametrize("module, source, rule", [
    ("arvis.acceptance.relaxed", "from arvis.engine.engine import DecodeEngine", "higher layer"),
    ("arvis.acceptance.relaxed", "import safetensors.torch", "pure tensor math"),
    ("arvis.acceptance.relaxed", "from arvis.data import photos", "independent"),
    ("arvis.engine.engine", "def f():\n    from arvis.methods import decode", "higher layer"),
    ("arvis.engine.engine", "from ..methods import sjd", "higher layer"),
    ("arvis.methods.sjd", "import importlib\nimportlib.import_module('arvis.pipelines')", "higher layer"),
    ("arvis.pipelines.pipeline_llamagen", "from arvis.eval import fid", "higher layer"),
    ("arvis.models.llamagen", "from arvis.engine import DecodeEngine", "higher layer"),
    ("arvis.eval.bench", "from arvis.training import common", "independent"),
    ("arvis.hub", "import apps.demo", "apps/ folder"),
    ("arvis.cli", "from eval.figures import main", "eval/ folder"),
])
def test_the_contract_catches_violations(module, source, rule):
    """Negative controls: each of these imports, planted in a module, is reported."""
    found = violations_in(source, module)
    assert found and rule in found[0][3], found


@pytest.mark.parametrize("module, source", [
    ("arvis.methods.sjd", "from arvis.acceptance import speculative\nfrom arvis.drafting import jacobi"),
    ("arvis.drafting.draft_model", "from arvis.engine.engine import DecodeEngine"),
    ("arvis.eval.provenance", "import arvis"),
    ("arvis.cli", "import importlib\nimportlib.import_module('arvis.eval.cli_commands')"),
    ("arvis.acceptance.relaxed", "import torch\nfrom arvis.utils.random import sample_categorical"),
])
def test_the_contract_allows_downward_imports(module, source):
    assert violations_in(source, module) == []


# ----------------------------------------------------------------------------- the family seam
# The apps ask a pipeline through its interface (arvis.pipelines.interface.ArvisPipeline), never by probing it.
APPS = ("arvis/cli.py", "arvis/cli_args.py", "arvis/demo", "arvis/eval", "eval", "apps")
PIPELINE_NAME = re.compile(r"\b(pipe|pipeline|pipelines)\b|\.pipeline\(")


def probes_of_pipelines(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of every ``hasattr`` / ``getattr`` whose object is a pipeline (named ``pipe``,
    ``pipeline``, ``….pipeline(…)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr") \
                and node.args and PIPELINE_NAME.search(ast.unparse(node.args[0])):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_apps_never_probe_a_pipeline_with_hasattr_or_getattr():
    offenders = []
    for place in APPS:
        path = ROOT / place
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            offenders += [f"{file.relative_to(ROOT)}:{line}: {call}" for line, call in probes_of_pipelines(file.read_text())]
    assert not offenders, offenders


@pytest.mark.parametrize("source", [
    "getattr(pipe, 'draft_transformer', None)",
    "hasattr(self.pipeline, 'num_frames')",
    "getattr(models.pipeline(name), 'class_names')",
])
def test_the_probe_check_has_teeth(source):
    assert probes_of_pipelines(source)


# ----------------------------------------------------------------------------- the tests' own layout
# tests/ is laid out like arvis: one folder per layer (pipelines/ has a subfolder per family with several test
# files); the shared helpers (conftest.py, lossless_harness.py, the *_fixtures.py models) stay at tests/.
TEST_FOLDERS = {
    "acceptance": "arvis.acceptance: the acceptance rules",
    "engine": "arvis.engine: the decode engine, sampling, randomness",
    "drafting": "arvis.drafting: drafters",
    "methods": "arvis.methods: the decoding methods and their lossless proofs",
    "models": "arvis.models, arvis.tokenizers: backbones, tokenizers, checkpoints and their loaders",
    "data": "arvis.data: datasets",
    "pipelines": "arvis.pipelines, arvis.hub: the pipeline of each family, shipped models",
    "eval": "arvis.eval and eval/: measurement, sampling jobs, figure scripts",
    "training": "arvis.training: the trainers",
    "demo": "arvis.demo: the demo page and server",
    "cli": "arvis.cli: the command line",
    "docs": "README.md and docs/: the documented commands and tables",
    "project": "the repository: this import contract, packaging",
}


def test_tests_are_laid_out_by_layer():
    tests = ROOT / "tests"
    stray = sorted(p.name for p in tests.glob("test_*.py"))
    assert not stray, f"test modules belong in a layer folder of tests/ ({sorted(TEST_FOLDERS)}): {stray}"
    modules = sorted(tests.rglob("test_*.py"))
    unknown = sorted({p.relative_to(tests).parts[0] for p in modules} - set(TEST_FOLDERS))
    assert not unknown, f"test folders that are no layer (add them to TEST_FOLDERS): {unknown}"
    # Every folder is a package, so modules are tests.<layer>.<name> and helpers import as tests.<helper>.
    missing = sorted(str(p.parent.relative_to(tests)) for p in modules if not (p.parent / "__init__.py").is_file())
    assert not missing, f"add an __init__.py to: {missing}"


def test_the_full_tier_names_only_existing_tests():
    from tests.conftest import FULL_TIER, FULL_TIER_TESTS, TESTS

    stale = sorted(entry for entry in FULL_TIER if not (TESTS / entry).exists())
    assert not stale, f"FULL_TIER entries that match no test module or folder: {stale}"
    names = {node.name for path in TESTS.rglob("test_*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef)}
    assert not FULL_TIER_TESTS - names, f"FULL_TIER_TESTS that name no test: {sorted(FULL_TIER_TESTS - names)}"
