"""arvis: fast, faithful decoding for visual autoregressive image and video generators.

The public API is imported lazily, so ``import arvis`` stays cheap; diffusers also resolves pipeline
components through these names (``model_index.json`` records ``["arvis", "LlamaGenTransformer"]``).
"""

from __future__ import annotations

from arvis.utils.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "LlamaGenTransformer": "arvis.models.llamagen",
    "LlamaGenVQModel": "arvis.tokenizers.llamagen_vq",
    "LlamaGenPipeline": "arvis.pipelines.pipeline_llamagen",
    "LlamaGenPipelineOutput": "arvis.pipelines.pipeline_llamagen",
    "Emu3Pipeline": "arvis.pipelines.pipeline_emu3",
    "Emu3PipelineOutput": "arvis.pipelines.pipeline_emu3",
    "JanusPipeline": "arvis.pipelines.pipeline_janus",
    "JanusPipelineOutput": "arvis.pipelines.pipeline_janus",
    "VARPipeline": "arvis.pipelines.pipeline_var",
    "VARPipelineOutput": "arvis.pipelines.pipeline_var",
    "MARTransformer": "arvis.models.mar",
    "MARDiffusionHead": "arvis.models.diffusion_head",
    "MARPipeline": "arvis.pipelines.pipeline_mar",
    "MARPipelineOutput": "arvis.pipelines.pipeline_mar",
    "load_mar_checkpoint": "arvis.models.mar",
    "export_mar_checkpoint": "arvis.models.mar",
    "VideoTransformer": "arvis.models.video",
    "VideoPipeline": "arvis.pipelines.pipeline_video",
    "VideoPipelineOutput": "arvis.pipelines.pipeline_video",
    "ArvisPipeline": "arvis.pipelines.interface",
    "DecoderKind": "arvis.methods.catalog",
    "compare": "arvis.demo.compare",
    "SamplingConfig": "arvis.engine.sampling",
    "DecodeEngine": "arvis.engine.engine",
    "decode": "arvis.methods",
    "available_methods": "arvis.methods",
    "build_method": "arvis.methods",
    "load_llamagen_checkpoint": "arvis.models.checkpoint",
    "export_llamagen_checkpoint": "arvis.models.checkpoint",
}

__getattr__, __dir__, __all__ = lazy_exports("arvis", _EXPORTS)
__all__ = [*__all__, "__version__"]
