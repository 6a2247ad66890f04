"""Diffusers-style pipelines, one per model family, behind one interface (:mod:`~arvis.pipelines.interface`).

The names are imported lazily: :mod:`arvis.families` (what a model folder offers, read from its
metadata) loads without torch, so the command line checks a request before anything heavy is imported.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ArvisPipeline": "arvis.pipelines.interface",
    "Emu3Pipeline": "arvis.pipelines.pipeline_emu3",
    "Emu3PipelineOutput": "arvis.pipelines.pipeline_emu3",
    "JanusPipeline": "arvis.pipelines.pipeline_janus",
    "JanusPipelineOutput": "arvis.pipelines.pipeline_janus",
    "LlamaGenPipeline": "arvis.pipelines.pipeline_llamagen",
    "LlamaGenPipelineOutput": "arvis.pipelines.pipeline_llamagen",
    "MARPipeline": "arvis.pipelines.pipeline_mar",
    "MARPipelineOutput": "arvis.pipelines.pipeline_mar",
    "VARPipeline": "arvis.pipelines.pipeline_var",
    "VARPipelineOutput": "arvis.pipelines.pipeline_var",
    "VideoPipeline": "arvis.pipelines.pipeline_video",
    "VideoPipelineOutput": "arvis.pipelines.pipeline_video",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'arvis.pipelines' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
