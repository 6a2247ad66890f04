"""The scripts of eval/ as modules (they import each other by name, as ``python eval/figures.py`` does)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tests import REPO_ROOT

EVAL = str(REPO_ROOT / "eval")


def eval_module(name: str) -> ModuleType:
    """``eval/<name>.py``, imported with eval/ on the path."""
    if EVAL not in sys.path:
        sys.path.insert(0, EVAL)
    return importlib.import_module(name)
