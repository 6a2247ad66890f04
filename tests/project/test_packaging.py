"""Dependencies: every core dependency in pyproject.toml is one arvis really uses, and everything arvis
imports at module level is a core dependency (or the standard library)."""

from __future__ import annotations

import ast
import sys
import tomllib

from tests import REPO_ROOT as ROOT

# Distribution name → import name, where they differ.
IMPORT_NAME = {"pillow": "PIL", "clean-fid": "cleanfid", "open-clip-torch": "open_clip", "scikit-image": "skimage",
               "scikit-learn": "sklearn", "gradio_client": "gradio_client"}
# Core dependencies arvis uses without importing them (the reason is part of the contract).
USED_WITHOUT_IMPORT = {"transformers": "T5 text encoders/tokenizers and Emu3 components load through diffusers"}


def dependencies() -> tuple[list[str], dict[str, list[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def name(spec: str) -> str:
        for sep in "<>=!~[ ;":
            spec = spec.split(sep)[0]
        return spec.strip().lower()

    extras = {k: [name(s) for s in v if not s.startswith("arvis")] for k, v in project["optional-dependencies"].items()}
    return [name(s) for s in project["dependencies"]], extras


def imports(module_level_only: bool) -> set[str]:
    found = set()
    for path in (ROOT / "arvis").rglob("*.py"):
        tree = ast.parse(path.read_text())
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found


def test_every_core_dependency_is_used():
    core, _ = dependencies()
    used = imports(module_level_only=False)
    unused = [d for d in core if IMPORT_NAME.get(d, d) not in used and d not in USED_WITHOUT_IMPORT]
    assert not unused, f"core dependencies arvis never imports (move them to an extra): {unused}"


def test_module_level_imports_are_core_dependencies():
    core, _ = dependencies()
    allowed = {IMPORT_NAME.get(d, d) for d in core} | set(sys.stdlib_module_names) | {"arvis", "__future__"}
    # Pages and subpackages that need an extra import it at module level only where the extra is required.
    extra_modules = {"gradio": "arvis/demo/page.py"}
    third_party = imports(module_level_only=True) - allowed - set(extra_modules)
    assert not third_party, f"module-level imports of packages that are not core dependencies: {sorted(third_party)}"


def test_extras_cover_the_optional_features():
    _, extras = dependencies()
    assert "accelerate" in extras["eval"] and "gradio" in extras["demo"] and "ruff" in extras["lint"]
    assert "imageio-ffmpeg" in extras["video"]  # MP4 export: without it imageio picks a non-video writer
    assert "torchvision" not in dependencies()[0]
