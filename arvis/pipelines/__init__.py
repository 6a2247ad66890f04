"""Diffusers-style pipelines."""

from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline, LlamaGenPipelineOutput

__all__ = ["LlamaGenPipeline", "LlamaGenPipelineOutput"]
