"""Decode engine: per-request state, logits processing, statistics."""

from arvis.engine.engine import DecodeEngine
from arvis.engine.sampling import SamplingConfig, logits_to_probs
from arvis.engine.stats import BatchStats, DecodeStats

__all__ = ["BatchStats", "DecodeEngine", "DecodeStats", "SamplingConfig", "logits_to_probs"]
