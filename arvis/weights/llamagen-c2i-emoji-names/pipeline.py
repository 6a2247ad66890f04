"""Lets diffusers' generic loader open this arvis folder:

    DiffusionPipeline.from_pretrained(folder, custom_pipeline="pipeline", trust_remote_code=True)

It only imports the pipeline class of the installed arvis package (pip install arvis).
"""

from arvis.pipelines.pipeline_llamagen import LlamaGenPipeline

__all__ = ["LlamaGenPipeline"]
