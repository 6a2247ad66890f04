"""Plain autoregressive decoding: one target forward per token (the baseline every method is measured against)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from arvis.engine.engine import DecodeEngine
from arvis.methods.base import DecodingMethod, register_method
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info


@register_method
@dataclass(frozen=True)
class Autoregressive(DecodingMethod):
    """Raster-order decoding, one token per forward, on the static cache (LlamaGen's ``generate``)."""

    info: ClassVar[MethodInfo] = method_info("ar", DecoderKind.TOKEN)
    positions_per_forward: ClassVar[int] = 1

    def run(self, engine: DecodeEngine) -> None:
        probs = engine.prefill()  # [B, V]: p of sequence index 0
        token = engine.sample(probs[:, None])  # [B, 1]
        index = torch.zeros_like(token)
        engine.commit(index, token)
        for j in range(1, engine.num_tokens):
            probs = engine.evaluate(token, index, extent=j)  # feed index j-1 → p of index j, [B, 1, V]
            token = engine.sample(probs)
            index = index + 1
            engine.commit(index, token)
