"""How records name files and folders: never by an absolute path of the machine that wrote them."""

from __future__ import annotations

import os
from pathlib import Path

# The shipped model folders (arvis/weights): pipelines link shared components (tokenizers) there.
WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"


def display_path(path: str | os.PathLike) -> str:
    """``path`` relative to the working directory when it lies inside it, else only its last component.

    Records (JSON, Markdown, PNG metadata) use this, so that they carry no absolute path of this machine.
    """
    p = Path(path).expanduser().resolve()
    try:
        return p.relative_to(Path.cwd().resolve()).as_posix() or "."
    except ValueError:
        return p.name
