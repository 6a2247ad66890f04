"""Janus's VQ tokenizer (transformers' ``JanusVQVAE``) as an arvis image tokenizer, and its training forward.

Janus generates with LlamaGen's VQ16 tokenizer: codes are looked up in an l2-normalised codebook
(``JanusVQVAEVectorQuantizer.get_codebook_entry`` normalises the code vectors the decoder reads). The original
tokenizer also normalises the encoder's latents before the nearest-code search; transformers' ``encode``
compares the raw vectors instead. :func:`nearest_codes` searches as the original does (cosine similarity of
normalised vectors: what the decoder's normalised inputs agree with), so codes of real images round-trip
through ``decode`` as Janus's own tokenizer would give them. Decoding is ``JanusVQVAE.decode`` itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from arvis.tokenizers.emu3_vq import QuantizedOutput


def _check_images(vq: nn.Module, images: torch.Tensor) -> None:
    if images.ndim != 4 or images.shape[1] != vq.config.in_channels:
        raise ValueError(f"images must be [batch, {vq.config.in_channels}, height, width], got {tuple(images.shape)}")
    f = downsample_factor(vq)
    if images.shape[-1] % f or images.shape[-2] % f:
        raise ValueError(f"image sides must be multiples of {f}, got {tuple(images.shape[-2:])}")


def downsample_factor(vq: nn.Module) -> int:
    """Pixels per token side: ``2 ** (levels − 1)``."""
    return 2 ** (len(vq.config.channel_multiplier) - 1)


def _latents(vq: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Encoder + ``quant_conv``, l2-normalised over channels: ``[B, D, h, w]``."""
    return F.normalize(vq.quant_conv(vq.encoder(images.to(vq.dtype))), dim=1)


def nearest_codes(vq: nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """Codes ``[B, h, w]`` of normalised latents ``[B, D, h, w]``: the most similar normalised code vector."""
    book = F.normalize(vq.quantize.embedding.weight, dim=-1)
    return torch.einsum("bdhw,kd->bhwk", latents, book).argmax(-1)


def _decode_latents(vq: nn.Module, quant: torch.Tensor) -> torch.Tensor:
    """``quant [B, D, h, w]`` (normalised code vectors) → images: ``JanusVQVAE.decode`` after the codebook lookup."""
    return vq.decoder(vq.post_quant_conv(quant))


def quantized_forward(vq: nn.Module, images: torch.Tensor) -> QuantizedOutput:
    """Training forward of a ``JanusVQVAE`` on images ``[B, 3, H, W]`` in ``[-1, 1]`` (any size divisible by the
    down-sampling factor): nearest normalised code, straight-through gradient, codebook and commitment terms on
    the normalised vectors, and the decoder reading them exactly as ``JanusVQVAE.decode`` does."""
    _check_images(vq, images)
    z = _latents(vq, images)  # [B, D, h, w]
    codes = nearest_codes(vq, z.detach())
    e = F.normalize(vq.quantize.embedding(codes), dim=-1).permute(0, 3, 1, 2)  # [B, D, h, w]
    codebook_loss = F.mse_loss(e, z.detach())
    commitment_loss = F.mse_loss(z, e.detach())
    quant = z + (e - z).detach()
    return QuantizedOutput(_decode_latents(vq, quant), codes, codebook_loss, commitment_loss, z.permute(0, 2, 3, 1))


class JanusImageTokenizer(nn.Module):
    """A ``JanusVQVAE`` seen as an image tokenizer: pixels ``[B, 3, H, W]`` in ``[-1, 1]`` ↔ codes ``[B, h, w]``."""

    def __init__(self, vq: nn.Module):
        super().__init__()
        self.vq = vq

    @property
    def codebook_size(self) -> int:
        return int(self.vq.config.num_embeddings)

    @property
    def downsample_factor(self) -> int:
        return downsample_factor(self.vq)

    def codebook_embeddings(self) -> torch.Tensor:
        """``[K, D]`` normalised code vectors (what the decoder reads; LANTERN's latent neighbourhoods)."""
        return F.normalize(self.vq.quantize.embedding.weight, dim=-1)

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Codes ``[B, h, w]`` of ``images [B, 3, H, W]`` in ``[-1, 1]`` (normalised nearest code, as Janus's VQ16)."""
        _check_images(self.vq, images)
        return nearest_codes(self.vq, _latents(self.vq, images))

    @torch.no_grad()
    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` from codes ``[B, h, w]`` (``JanusVQVAE.decode``; the grid is the
        model's, ``vq_config.num_patches`` square)."""
        side = int(self.vq.quantize.quant_state_dims[0])
        if codes.ndim != 3 or tuple(codes.shape[1:]) != (side, side):
            raise ValueError(f"codes must be [batch, {side}, {side}] (the model's grid), got {tuple(codes.shape)}")
        if int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size:
            raise ValueError(f"codes must lie in [0, {self.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]")
        return self.vq.decode(codes.reshape(codes.shape[0], -1).to(self.vq.device))


__all__ = ["JanusImageTokenizer", "downsample_factor", "nearest_codes", "quantized_forward"]
