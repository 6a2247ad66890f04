"""Toy diffusion heads implementing :class:`arvis.models.protocol.DiffusionHead`, for the continuous
speculative decoding tests and ``eval/continuous_acceptance.py``.

- :class:`MixtureDenoiserHead`: the exact (Bayes-optimal) DDPM denoiser of a mixture-of-Gaussians prior
  whose component means move with the conditioning ``z``; sampled with DDPM's posterior transitions on a
  cosine schedule (MAR's ``p_sample``: mean from the predicted ``x_0``, fixed posterior std times the head
  temperature, no noise at step 0). Analytic, so a pair of heads "close" to each other is a perturbation
  of the mixture's parameters.
- :class:`MLPHead`: a randomly initialised noise-prediction MLP on the same schedule (an ``nn.Module``, as
  a trained head would be).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def cosine_alpha_bars(steps: int) -> torch.Tensor:
    """``ᾱ`` of the state fed to step ``s`` (``[S]``, fp64), cosine schedule, betas clipped at 0.999."""
    u = torch.arange(0, steps + 1, dtype=torch.float64) / steps
    f = torch.cos((u + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0)


class _DDPMSchedule:
    """DDPM posterior coefficients: step ``s`` maps a state at noise level ``ᾱ_s`` to level ``ᾱ_{s−1}`` (1 at s = 0)."""

    def __init__(self, steps: int):
        self.steps = steps
        ab = cosine_alpha_bars(steps)
        prev = torch.cat([torch.ones(1, dtype=torch.float64), ab[:-1]])
        beta = 1 - ab / prev
        self.alpha_bar = ab.float()
        self.coef_x0 = (prev.sqrt() * beta / (1 - ab)).float()
        self.coef_xt = ((1 - beta).sqrt() * (1 - prev) / (1 - ab)).float()
        self.std = (beta * (1 - prev) / (1 - ab)).sqrt().float()

    def posterior(self, x: torch.Tensor, x0: torch.Tensor, step: int, temperature: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.coef_x0[step] * x0 + self.coef_xt[step] * x
        return mean, (self.std[step] * temperature).expand(x.shape[0], 1)


class MixtureDenoiserHead:
    """The Bayes-optimal DDPM head of ``Σ_k w_k N(m_k + z·W, s_k² I)`` (module docstring)."""

    def __init__(self, weights, means, stds, steps: int, z_proj: torch.Tensor | None = None):
        self.weights = torch.as_tensor(weights, dtype=torch.float32)
        self.means = torch.as_tensor(means, dtype=torch.float32)  # [K, D]
        self.stds = torch.as_tensor(stds, dtype=torch.float32)  # [K]
        self.token_dim = int(self.means.shape[1])
        self.z_proj = z_proj  # [C, D] or None (z ignored)
        self.schedule = _DDPMSchedule(steps)
        self.calls = 0

    def num_sampling_steps(self) -> int:
        return self.schedule.steps

    def predict_x0(self, x: torch.Tensor, step: int, z: torch.Tensor) -> torch.Tensor:
        ab = self.schedule.alpha_bar[step]
        m = self.means[None]  # [1, K, D]
        if self.z_proj is not None:
            m = m + (z.float() @ self.z_proj)[:, None]
        var = ab * self.stds ** 2 + 1 - ab  # [K]
        diff = x[:, None] - ab.sqrt() * m  # [N, K, D]
        logits = self.weights.log() - 0.5 * (diff ** 2).sum(-1) / var - 0.5 * self.token_dim * var.log()
        r = logits.softmax(-1)  # [N, K]
        cond = m + (ab.sqrt() * self.stds ** 2 / var)[None, :, None] * diff
        return (r[..., None] * cond).sum(1)

    def transition(self, x_t: torch.Tensor, step: int, z: torch.Tensor, *, temperature: float = 1.0,
                   guidance_scale: float = 1.0, z_uncond: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        x0 = self.predict_x0(x_t, step, z)
        if z_uncond is not None and guidance_scale != 1.0:
            # ε is affine in the predicted x0 at fixed x_t, so MAR's ε-combination is the same combination of x0
            u = self.predict_x0(x_t, step, z_uncond)
            x0 = u + guidance_scale * (x0 - u)
        return self.schedule.posterior(x_t, x0, step, temperature)


class MLPHead(nn.Module):
    """A randomly initialised ε-prediction MLP head on the cosine schedule (a stand-in for MAR's DiffLoss)."""

    def __init__(self, token_dim: int, z_dim: int, steps: int, width: int = 32, seed: int = 0):
        super().__init__()
        self.token_dim = token_dim
        self.schedule = _DDPMSchedule(steps)
        gen = torch.Generator().manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(token_dim + z_dim + 1, width), nn.SiLU(), nn.Linear(width, token_dim))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        self.calls = 0

    def num_sampling_steps(self) -> int:
        return self.schedule.steps

    def _eps(self, x: torch.Tensor, step: int, z: torch.Tensor) -> torch.Tensor:
        t = torch.full((x.shape[0], 1), step / self.schedule.steps)
        return self.net(torch.cat([x, z, t], -1))

    @torch.no_grad()
    def transition(self, x_t: torch.Tensor, step: int, z: torch.Tensor, *, temperature: float = 1.0,
                   guidance_scale: float = 1.0, z_uncond: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        eps = self._eps(x_t, step, z)
        if z_uncond is not None and guidance_scale != 1.0:
            u = self._eps(x_t, step, z_uncond)
            eps = u + guidance_scale * (eps - u)
        ab = self.schedule.alpha_bar[step]
        x0 = (x_t - (1 - ab).sqrt() * eps) / ab.sqrt()
        return self.schedule.posterior(x_t, x0, step, temperature)


def mixture_pair(steps: int, shift: float = 0.3, dim: int = 1, z_dim: int = 0
                 ) -> tuple[MixtureDenoiserHead, MixtureDenoiserHead]:
    """A bimodal target head and a draft head whose modes are shifted by ``shift`` and reweighted."""
    gen = torch.Generator().manual_seed(7)
    base = torch.tensor([[-1.0], [1.2]]).expand(2, dim).clone()
    proj = torch.randn(z_dim, dim, generator=gen) * 0.5 if z_dim else None
    target = MixtureDenoiserHead([0.4, 0.6], base, [0.35, 0.5], steps, proj)
    draft = MixtureDenoiserHead([0.5, 0.5], base + shift, [0.4, 0.45], steps, proj)
    return target, draft
