"""The models shipped with arvis, by name, from anywhere (no hub access)::

    import arvis.weights
    arvis.weights.path("c2i")        # the folder of the shipped class-conditional pipeline
    arvis.weights.names()            # the aliases present in this installation

``LlamaGenPipeline.from_pretrained("c2i")`` resolves the same names.
"""

from __future__ import annotations

from pathlib import Path


def path(name: str) -> Path:
    """The folder of shipped model ``name`` (an alias such as ``"c2i"``, or a shipped folder's name).

    Raises:
        ValueError: ``name`` is not a shipped model present in this installation.
    """
    from arvis.hub import SHIPPED_PIPELINES, WEIGHTS_DIR, is_pipeline_folder

    if name not in SHIPPED_PIPELINES and name not in SHIPPED_PIPELINES.values():
        raise ValueError(f"name: {name!r} is not a shipped model; shipped: {', '.join(SHIPPED_PIPELINES)}")
    folder = WEIGHTS_DIR / SHIPPED_PIPELINES.get(name, name)
    if not is_pipeline_folder(folder):
        raise ValueError(f"name: the shipped model {name!r} is not present in this installation")
    return folder


def names() -> list[str]:
    """Aliases of the shipped pipelines present in this installation."""
    from arvis.hub import shipped_names

    return shipped_names()
