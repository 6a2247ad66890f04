"""Diffusers-style pipelines, one per model family, behind one interface (:mod:`~arvis.pipelines.interface`).

The names are imported lazily: :mod:`arvis.families` (what a model folder offers, read from its
metadata) loads without torch, so the command line checks a request before anything heavy is imported.
"""

from __future__ import annotations

from arvis.utils.lazy import lazy_exports

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

__getattr__, __dir__, __all__ = lazy_exports("arvis.pipelines", _EXPORTS)
