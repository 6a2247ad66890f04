"""arvis's tests, one folder per layer of the library (see tests/conftest.py for the two tiers)."""

from pathlib import Path

# The repository's root: test modules sit at different depths, so they ask here instead of counting parents.
REPO_ROOT = Path(__file__).resolve().parent.parent
