"""Diffusers-style pipelines."""

from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline, LlamaGenPipelineOutput
from arvis.pipelines.pipeline_var import VARPipeline, VARPipelineOutput

__all__ = ["LlamaGenPipeline", "LlamaGenPipelineOutput", "VARPipeline", "VARPipelineOutput", "pipeline_class"]

PIPELINES = {cls.__name__: cls for cls in (LlamaGenPipeline, VARPipeline)}


def pipeline_class(folder) -> type:
    """The pipeline class a saved folder names in its ``model_index.json`` (``_class_name``)."""
    import json
    from pathlib import Path

    name = json.loads((Path(folder) / "model_index.json").read_text()).get("_class_name")
    if name not in PIPELINES:
        raise ValueError(f"model: {str(folder)!r} holds a {name!r} pipeline; arvis knows {', '.join(PIPELINES)}")
    return PIPELINES[name]
