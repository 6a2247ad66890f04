"""Diffusers-style pipelines."""

from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline, LlamaGenPipelineOutput
from arvis.pipelines.pipeline_video import VideoPipeline, VideoPipelineOutput

__all__ = ["LlamaGenPipeline", "LlamaGenPipelineOutput", "VideoPipeline", "VideoPipelineOutput"]
