"""Diffusers-style pipelines."""

from arvis.pipelines.pipeline_emu3 import Emu3Pipeline, Emu3PipelineOutput
from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline, LlamaGenPipelineOutput
from arvis.pipelines.pipeline_mar import MARPipeline, MARPipelineOutput
from arvis.pipelines.pipeline_var import VARPipeline, VARPipelineOutput
from arvis.pipelines.pipeline_video import VideoPipeline, VideoPipelineOutput

__all__ = ["Emu3Pipeline", "Emu3PipelineOutput", "LlamaGenPipeline", "LlamaGenPipelineOutput", "MARPipeline",
           "MARPipelineOutput", "VARPipeline",
           "VARPipelineOutput", "VideoPipeline", "VideoPipelineOutput"]
