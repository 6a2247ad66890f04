"""Emu3's VQ tokenizer (transformers' ``Emu3VQVAE``) for still images: encode, decode, and the training forward.

``Emu3VQVAE`` turns video clips or images into codes (``encode``) and codes back into pixels (``decode``);
its quantiser returns nearest-codebook indices only. :class:`Emu3ImageTokenizer` wraps a model with the
tokenizer verbs the rest of arvis uses (``encode``, ``decode_codes``, ``codebook_size``,
``downsample_factor``, ``codebook_embeddings``) and :func:`quantized_forward` is the differentiable path
a trainer needs (straight-through estimator, codebook and commitment terms) — built from the model's own
public submodules, so the trained weights load into ``Emu3VQVAE`` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class QuantizedOutput:
    """What :func:`quantized_forward` returns.

    Attributes:
        reconstruction: ``[B, 3, H, W]`` in the input's range.
        codes: ``[B, h, w]`` int64 codebook indices.
        codebook_loss: ``||sg(z) − e||²`` (moves the codebook toward the encoder).
        commitment_loss: ``||z − sg(e)||²`` (keeps the encoder near the codebook).
        latents: ``[B, h, w, D]`` encoder outputs before quantisation (dead-code restarts).
    """

    reconstruction: torch.Tensor
    codes: torch.Tensor
    codebook_loss: torch.Tensor
    commitment_loss: torch.Tensor
    latents: torch.Tensor


def _check_images(vq: nn.Module, images: torch.Tensor) -> None:
    if images.ndim != 4 or images.shape[1] != vq.config.in_channels:
        raise ValueError(f"images must be [batch, {vq.config.in_channels}, height, width], got {tuple(images.shape)}")
    f = vq.vision_spatial_factor
    if images.shape[-1] % f or images.shape[-2] % f:
        raise ValueError(f"image sides must be multiples of {f}, got {tuple(images.shape[-2:])}")


def _latents(vq: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Encoder + ``quant_conv`` on still images (one frame each, repeated as ``Emu3VQVAE.encode`` does): ``[B, T', D, h, w]``."""
    frames = images[:, None].repeat(1, vq.config.temporal_downsample_factor, 1, 1, 1).to(vq.dtype)
    h = vq.encoder(frames)  # [B, T', C, h, w]
    return vq.quant_conv(h.permute(0, 2, 1, 3, 4)).permute(0, 2, 1, 3, 4)


def _decode(vq: nn.Module, quant: torch.Tensor) -> torch.Tensor:
    """``quant [B, T', D, h, w]`` → the first frame ``[B, 3, H, W]`` (``Emu3VQVAE.decode`` for a still image)."""
    B = quant.shape[0]
    post = vq.post_quant_conv(quant.permute(0, 2, 1, 3, 4)).permute(0, 2, 1, 3, 4)
    video = vq.decoder(post, quant)
    f = vq.spatial_scale_factor
    video = video.reshape(B, -1, vq.config.out_channels, quant.shape[-2] * f, quant.shape[-1] * f)
    return video[:, 0]


def quantized_forward(vq: nn.Module, images: torch.Tensor) -> QuantizedOutput:
    """Training forward of an ``Emu3VQVAE`` on still images ``[B, 3, H, W]`` in ``[-1, 1]``.

    The nearest code (``vq.quantize``) is looked up, the gradient passes straight through to the encoder,
    and the decoder reads the quantised latents exactly as ``Emu3VQVAE.decode`` does at inference.
    """
    _check_images(vq, images)
    z = _latents(vq, images)  # [B, T', D, h, w]
    codes = vq.quantize(z)  # [B, T', h, w] (argmin, no gradient)
    e = vq.quantize.embedding(codes).permute(0, 1, 4, 2, 3)  # [B, T', D, h, w]
    codebook_loss = F.mse_loss(e, z.detach())
    commitment_loss = F.mse_loss(z, e.detach())
    quant = z + (e - z).detach()
    return QuantizedOutput(_decode(vq, quant), codes[:, 0], codebook_loss, commitment_loss,
                           z[:, 0].permute(0, 2, 3, 1))


class Emu3ImageTokenizer(nn.Module):
    """An ``Emu3VQVAE`` seen as an image tokenizer: pixels ``[B, 3, H, W]`` in ``[-1, 1]`` ↔ codes ``[B, h, w]``."""

    def __init__(self, vq: nn.Module):
        super().__init__()
        self.vq = vq

    @property
    def codebook_size(self) -> int:
        return int(self.vq.config.codebook_size)

    @property
    def downsample_factor(self) -> int:
        return int(self.vq.vision_spatial_factor)

    def codebook_embeddings(self) -> torch.Tensor:
        """``[K, D]`` code vectors (what the decoder reads; LANTERN's latent neighbourhoods)."""
        return self.vq.quantize.embedding.weight

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Codes ``[B, h, w]`` of ``images [B, 3, H, W]`` in ``[-1, 1]`` (same as ``Emu3VQVAE.encode``)."""
        _check_images(self.vq, images)
        return self.vq.quantize(_latents(self.vq, images))[:, 0]

    @torch.no_grad()
    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """Images ``[B, 3, H, W]`` in ``[-1, 1]`` from codes ``[B, h, w]`` (``Emu3VQVAE.decode``)."""
        if codes.ndim != 3:
            raise ValueError(f"codes must be [batch, height, width], got {tuple(codes.shape)}")
        if int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size:
            raise ValueError(f"codes must lie in [0, {self.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]")
        return self.vq.decode(codes.to(self.vq.device))


__all__ = ["Emu3ImageTokenizer", "QuantizedOutput", "quantized_forward"]
