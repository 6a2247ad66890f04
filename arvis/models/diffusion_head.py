"""MAR's per-token diffusion head (Li et al., NeurIPS 2024, arXiv:2406.11838), weight-compatible with LTH14/mar.

The head models ``p(x | z)``: a continuous token ``x`` (a VAE latent, ``token_dim`` channels) given the
transformer's output ``z`` for its position. It is the official ``DiffLoss``:

- the denoiser ``net`` (``SimpleMLPAdaLN``): ``input_proj(x)``, then ``depth`` residual MLP blocks
  modulated by AdaLN from ``time_embed(t) + cond_embed(z)``, then a DiT-style final layer that outputs
  ``2 · token_dim`` channels: the noise prediction ε and the variance interpolation ``v ∈ [-1, 1]``
  (IDDPM's learned range);
- a cosine noise schedule over 1000 training steps, re-spaced to ``num_sampling_steps`` steps for
  sampling (IDDPM's ``space_timesteps``: the net sees the original step indices);
- optionally (``sampling_schedule="linear"``, not official) sampling over the noise levels of DDPM's
  linear-β schedule instead, the net queried at the (fractional) cosine step of equal noise level. The
  cosine schedule clips its last βs at 0.999, so its final level is ᾱ ≈ 2.4e-9 and the first transition
  multiplies the ε error by up to 316 at 100 steps (632 at 50; :meth:`DDPMTables.eps_error_gain`); a head
  trained briefly (ε error ~3e-2 there) then samples tokens hundreds of times too large. The linear schedule ends at ᾱ ≈ 4e-5 with no such jump;
  the head's weights and training are the same (the official sampler stays the default);
- DDPM ancestral sampling where MAR's *temperature* multiplies the noise of every transition (not the
  initial ``x_T``), and classifier-free guidance combines the noise predictions
  ``ε = ε_u + s · (ε_c − ε_u)`` while the variance comes from the conditional rows.

Vocabulary: sampling steps count down ``S−1 … 0`` (``S = num_sampling_steps()``); a *transition* at step
``i`` is the Gaussian ``p(x_{i-1} | x_i, z) = N(mean, std²)``; at step 0 the std is 0 (``x_0 = mean``).
A *trajectory* is ``x_T = x_S, x_{S-1}, …, x_0``. This is the :class:`~arvis.models.protocol.DiffusionHead`
protocol that continuous speculative decoding (:mod:`arvis.acceptance.continuous`) works with.

The schedule tables are computed in float64 and cast to float32 where used, as the official
``_extract_into_tensor`` does, so that transitions match the official sampler to float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from arvis.utils.config_check import Bound, CheckedFolderMixin, check_config

TRAIN_STEPS = 1000  # the official DiffLoss trains on a 1000-step cosine schedule


# ----------------------------------------------------------------------------- schedule
def cosine_betas(steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """IDDPM's cosine schedule (``ᾱ(t) = cos²((t + 0.008) / 1.008 · π/2)``) as ``steps`` betas, float64."""
    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    return torch.tensor([min(1 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), max_beta) for i in range(steps)],
                        dtype=torch.float64, device="cpu")


def linear_betas(steps: int) -> torch.Tensor:
    """DDPM's linear schedule (β from 1e-4 to 0.02, scaled to ``steps``), float64."""
    scale = 1000 / steps
    return torch.linspace(scale * 1e-4, scale * 0.02, steps, dtype=torch.float64, device="cpu")


SAMPLING_SCHEDULES = ("cosine", "linear")


def equivalent_steps(alphas_cumprod: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
    """The fractional steps of the ``trained`` ᾱ table that have the noise levels ``alphas_cumprod``
    (linear interpolation in log ᾱ, which decreases with the step), float64."""
    log_trained, log_target = trained.log(), alphas_cumprod.log()
    # searchsorted needs ascending values: -log ᾱ increases with the step
    hi = torch.searchsorted(-log_trained, -log_target).clamp(1, len(trained) - 1)
    lo = hi - 1
    frac = (log_trained[lo] - log_target) / (log_trained[lo] - log_trained[hi])
    return lo.double() + frac.clamp(0, 1)


def spaced_timesteps(train_steps: int, sampling_steps: int) -> list[int]:
    """The training steps a ``sampling_steps``-step sampler keeps (IDDPM's ``space_timesteps`` with one
    section: evenly strided, rounded), ascending."""
    if not 1 <= sampling_steps <= train_steps:
        raise ValueError(f"num_sampling_steps must be in [1, {train_steps}], got {sampling_steps}")
    if sampling_steps == 1:
        return [0]
    stride = (train_steps - 1) / (sampling_steps - 1)
    steps, cur = [], 0.0
    for _ in range(sampling_steps):
        steps.append(round(cur))
        cur += stride
    return sorted(set(steps))


class DDPMTables:
    """Float64 tables of a re-spaced diffusion (the quantities ``GaussianDiffusion`` precomputes), on the CPU
    (also when the module is built on the meta device)."""

    def __init__(self, train_steps: int, sampling_steps: int, schedule: str = "cosine"):
        if schedule not in SAMPLING_SCHEDULES:
            raise ValueError(f"sampling schedule must be one of {SAMPLING_SCHEDULES}, got {schedule!r}")
        trained = torch.cumprod(1 - cosine_betas(train_steps), 0)
        kept_steps = torch.tensor(spaced_timesteps(train_steps, sampling_steps), dtype=torch.int64, device="cpu")
        if schedule == "cosine":
            base = trained
            self.timestep_map = kept_steps  # integer steps, as official
        else:
            base = torch.cumprod(1 - linear_betas(train_steps), 0)
            self.timestep_map = equivalent_steps(base[kept_steps], trained).float()
        self.schedule = schedule
        self._cache: dict[tuple[str, int, torch.device], torch.Tensor] = {}
        kept = base[kept_steps]
        prev = torch.cat([torch.ones(1, dtype=torch.float64, device="cpu"), kept[:-1]])
        betas = 1 - kept / prev
        self.betas = betas
        self.alphas_cumprod = kept
        self.sqrt_recip_alphas_cumprod = torch.sqrt(1 / kept)
        self.sqrt_recipm1_alphas_cumprod = torch.sqrt(1 / kept - 1)
        posterior_variance = betas * (1 - prev) / (1 - kept)
        # log clipped: the posterior variance is 0 at the first step
        self.posterior_log_variance_clipped = torch.log(torch.cat([posterior_variance[1:2], posterior_variance[1:]])) \
            if len(betas) > 1 else torch.zeros(0, dtype=torch.float64, device="cpu")
        self.log_betas = torch.log(betas)
        self.posterior_mean_coef1 = betas * torch.sqrt(prev) / (1 - kept)
        self.posterior_mean_coef2 = (1 - prev) * torch.sqrt(1 - betas) / (1 - kept)

    def at_step(self, step: int, device: torch.device) -> torch.Tensor:
        """The net's (original-schedule) step of sampling step ``step``, a scalar tensor on ``device``, cached
        like :meth:`at` (the same value and dtype as ``timestep_map[step]``)."""
        key = ("timestep_map", step, device)
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = self.timestep_map[step].to(device)
        return value

    def eps_error_gain(self) -> float:
        """The largest factor by which one transition moves the next sample per unit of ε error:
        ``coef1 · √(1/ᾱ − 1)`` over the steps (the mean is ``coef1 · x0 + coef2 · x`` with
        ``x0 = x/√ᾱ − √(1/ᾱ − 1)·ε``)."""
        return float((self.posterior_mean_coef1 * self.sqrt_recipm1_alphas_cumprod).max())

    def at(self, name: str, step: int, device: torch.device) -> torch.Tensor:
        """Table ``name`` at sampling step ``step`` as a float32 scalar tensor (cast after indexing, as official).

        Cached per device: a transition reads seven of these, and on small heads the index-and-cast ops were a
        measurable share of the head's time (the head is called ``S`` times per token). The cached value is the
        same cast of the same float64 entry, so outputs do not change."""
        key = (name, step, device)
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = getattr(self, name)[step].to(device=device, dtype=torch.float32)
        return value


# ----------------------------------------------------------------------------- the denoiser (SimpleMLPAdaLN)
def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class TimestepEmbedder(nn.Module):
    """Sinusoidal step features (cos first, 256 channels) through a two-layer SiLU MLP."""

    def __init__(self, hidden: int, frequency_size: int = 256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(frequency_size, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.frequency_size = frequency_size

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.frequency_size // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t[:, None].float() * freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(emb.to(self.mlp[0].weight.dtype))


class ResBlock(nn.Module):
    """``x + gate · MLP(LN(x)·(1+scale) + shift)`` with ``(shift, scale, gate)`` from the condition."""

    def __init__(self, channels: int):
        super().__init__()
        self.in_ln = nn.LayerNorm(channels, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(channels, channels), nn.SiLU(), nn.Linear(channels, channels))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(channels, 3 * channels))  # noqa: N815 - official

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(y).chunk(3, dim=-1)
        return x + gate * self.mlp(_modulate(self.in_ln(x), shift, scale))


class FinalLayer(nn.Module):
    def __init__(self, channels: int, out_channels: int):
        super().__init__()
        self.norm_final = nn.LayerNorm(channels, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(channels, out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(channels, 2 * channels))  # noqa: N815 - official

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(_modulate(self.norm_final(x), shift, scale))


class SimpleMLPAdaLN(nn.Module):
    """The official denoiser network (parameter names as in LTH14/mar ``models/diffloss.py``)."""

    def __init__(self, in_channels: int, width: int, out_channels: int, cond_channels: int, depth: int):
        super().__init__()
        self.time_embed = TimestepEmbedder(width)
        self.cond_embed = nn.Linear(cond_channels, width)
        self.input_proj = nn.Linear(in_channels, width)
        self.res_blocks = nn.ModuleList(ResBlock(width) for _ in range(depth))
        self.final_layer = FinalLayer(width, out_channels)

    def forward(self, x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """``x [N, D]``, original-schedule steps ``t [N]``, condition ``c [N, C]`` → ``[N, 2D]`` (ε, v)."""
        h = self.input_proj(x)
        y = self.time_embed(t) + self.cond_embed(c)
        for block in self.res_blocks:
            h = block(h, y)
        return self.final_layer(h, y)


# ----------------------------------------------------------------------------- the head
HEAD_CONFIG_BOUNDS: dict[str, Bound] = {
    "token_dim": Bound.integer(1, 65536),
    "cond_dim": Bound.integer(1, 65536),
    "width": Bound.integer(1, 65536),
    "depth": Bound.integer(1, 256),
    "sampling_steps": Bound.integer(1, TRAIN_STEPS, note="DDPM steps at sampling, a subset of the 1000 trained"),
    "sampling_schedule": Bound.choice(*SAMPLING_SCHEDULES),
}


class MARDiffusionHead(CheckedFolderMixin, ModelMixin, ConfigMixin):
    """MAR's ``DiffLoss`` for sampling: a :class:`~arvis.models.protocol.DiffusionHead`.

    Its state dict is the official ``diffloss.*`` entries without the ``diffloss.`` prefix
    (``net.time_embed.mlp.0.weight`` …); :func:`arvis.models.mar.load_mar_checkpoint` splits an official
    checkpoint into transformer and head.

    Args:
        token_dim: channels of a token (``vae_embed_dim · patch_size²``; 16 for KL-16).
        cond_dim: channels of ``z`` (the transformer's decoder width).
        width, depth: the denoiser's width and residual blocks (official ``diffloss_w`` / ``diffloss_d``).
        sampling_steps: DDPM steps at sampling (official ``num_sampling_steps``, ``"100"``).
        sampling_schedule: ``"cosine"`` (official: the trained schedule re-spaced) or ``"linear"`` (DDPM's
            linear-β noise levels, the net asked at the cosine step of equal ᾱ; see the module docstring).
    """

    config_name = "config.json"
    config_bounds = HEAD_CONFIG_BOUNDS

    @register_to_config
    def __init__(self, token_dim: int = 16, cond_dim: int = 1024, width: int = 1024, depth: int = 3,
                 sampling_steps: int = 100, sampling_schedule: str = "cosine"):
        super().__init__()
        check_config(self.config, HEAD_CONFIG_BOUNDS, source=type(self).__name__)
        for name, value in (("token_dim", token_dim), ("cond_dim", cond_dim), ("width", width), ("depth", depth),
                            ("sampling_steps", sampling_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        self.token_dim = token_dim
        self.net = SimpleMLPAdaLN(token_dim, width, 2 * token_dim, cond_dim, depth)
        self._tables = DDPMTables(TRAIN_STEPS, sampling_steps, sampling_schedule)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """The official initialisation, drawn from ``generator``: Xavier-uniform linears with zero biases,
        N(0, 0.02²) for the step embedding's MLP, and zeros for every AdaLN modulation and the output layer
        (an untrained head therefore predicts ε = 0)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                bound = math.sqrt(6 / (m.in_features + m.out_features))
                m.weight.uniform_(-bound, bound, generator=generator)
                m.bias.zero_()
        for layer in (self.net.time_embed.mlp[0], self.net.time_embed.mlp[2]):
            layer.weight.normal_(0.0, 0.02, generator=generator)
        for block in self.net.res_blocks:
            block.adaLN_modulation[-1].weight.zero_()
            block.adaLN_modulation[-1].bias.zero_()
        final = self.net.final_layer
        for t in (final.adaLN_modulation[-1].weight, final.adaLN_modulation[-1].bias, final.linear.weight,
                  final.linear.bias):
            t.zero_()

    # ------------------------------------------------------------------ protocol
    def num_sampling_steps(self) -> int:
        return len(self._tables.timestep_map)

    def with_sampling_steps(self, steps: int, schedule: str | None = None) -> MARDiffusionHead:
        """The same weights sampled with ``steps`` DDPM steps on ``schedule`` (default: this head's); a shallow
        copy, the module is shared."""
        import copy

        other = copy.copy(self)
        other._tables = DDPMTables(TRAIN_STEPS, steps, schedule or self._tables.schedule)
        return other

    def transition(self, x_t: torch.Tensor, step: int, z: torch.Tensor, *, temperature: float = 1.0,
                   guidance_scale: float = 1.0, z_uncond: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of ``p(x_{step-1} | x_step, z)``.

        Args:
            x_t: ``[N, D]`` the current sample.
            step: sampling step, ``num_sampling_steps()-1`` (pure noise) down to 0.
            z: ``[N, C]`` conditions.
            temperature: MAR's temperature, a factor on the std (>= 0).
            guidance_scale: CFG scale ``s``; used when ``z_uncond`` is given (then the noise prediction
                is ``ε_u + s·(ε_c − ε_u)``, as MAR computes it whenever its overall cfg is not 1).
            z_uncond: ``[N, C]`` unconditional conditions, or ``None`` (no guidance).

        Returns:
            ``(mean [N, D], std [N, 1])`` in float32; std is 0 at step 0.
        """
        S = self.num_sampling_steps()
        if not 0 <= step < S:
            raise ValueError(f"step must be in [0, {S - 1}], got {step}")
        N, D = x_t.shape
        dtype = self.net.input_proj.weight.dtype
        t = self._tables.at_step(step, x_t.device).expand(N)
        if z_uncond is None:
            out = self.net(x_t.to(dtype), t, z.to(dtype)).float()
            eps, v = out[:, :D], out[:, D:]
        else:
            both = self.net(torch.cat([x_t, x_t]).to(dtype), torch.cat([t, t]), torch.cat([z, z_uncond]).to(dtype))
            cond, uncond = both.float().chunk(2)
            eps = uncond[:, :D] + guidance_scale * (cond[:, :D] - uncond[:, :D])
            v = cond[:, D:]
        x = x_t.float()
        tab = self._tables
        dev = x.device
        x0 = tab.at("sqrt_recip_alphas_cumprod", step, dev) * x - tab.at("sqrt_recipm1_alphas_cumprod", step, dev) * eps
        mean = tab.at("posterior_mean_coef1", step, dev) * x0 + tab.at("posterior_mean_coef2", step, dev) * x
        if step == 0:
            return mean, torch.zeros(N, 1, device=dev)
        frac = (v + 1) / 2
        log_var = frac * tab.at("log_betas", step, dev) + (1 - frac) * tab.at("posterior_log_variance_clipped", step, dev)
        return mean, torch.exp(0.5 * log_var) * temperature

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, z: torch.Tensor, generator: torch.Generator | None = None, temperature: float = 1.0, *,
               guidance_scale: float = 1.0, z_uncond: torch.Tensor | None = None, noise: torch.Tensor | None = None,
               return_trajectory: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Ancestral DDPM sampling: ``x_T ~ N(0, I)``, then ``x_{i-1} = mean + std · ε_i`` down to ``x_0``.

        Args:
            z: ``[N, C]`` conditions.
            generator: draws ``x_T`` and every ``ε_i`` (unless ``noise`` is given).
            temperature: MAR's temperature (multiplies the transition noise, not ``x_T``).
            guidance_scale, z_uncond: classifier-free guidance (see :meth:`transition`).
            noise: ``[S, N, D]`` instead of drawing: ``noise[0]`` is ``x_T``, ``noise[k]`` (k ≥ 1) the
                ``ε`` of step ``S − k`` (the last step, 0, takes no noise). Shared noise couples two heads.
            return_trajectory: also return ``[S + 1, N, D]``: ``x_T, x_{S-1}, …, x_0``.

        Returns:
            ``x_0 [N, D]`` (float32), or ``(x_0, trajectory)``.
        """
        check_temperature(temperature)
        S, N, D = self.num_sampling_steps(), z.shape[0], self.token_dim
        if noise is None:
            noise = torch.randn(S, N, D, generator=generator, device=z.device if generator is None else generator.device)
            noise = noise.to(z.device)
        elif tuple(noise.shape) != (S, N, D):
            raise ValueError(f"noise must have shape {(S, N, D)}, got {tuple(noise.shape)}")
        x = noise[0].float()
        trajectory = [x] if return_trajectory else None
        for k, step in enumerate(range(S - 1, -1, -1)):
            mean, std = self.transition(x, step, z, temperature=temperature, guidance_scale=guidance_scale,
                                        z_uncond=z_uncond)
            x = mean if step == 0 else mean + std * noise[k + 1].float()
            if trajectory is not None:
                trajectory.append(x)
        if trajectory is not None:
            return x, torch.stack(trajectory)
        return x

    def forward(self, x: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The raw denoiser: ``[N, 2D]`` (ε, v) at original-schedule steps ``t``."""
        return self.net(x, t, z)


def check_temperature(temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (MAR's head temperature; 0 follows the means), "
                         f"got {temperature!r}")


def split_sampling_steps(value: int | str | Sequence[int]) -> int:
    """The official ``num_sampling_steps`` argument (a string such as ``"100"``) as one step count."""
    if isinstance(value, str):
        parts = [p for p in value.split(",") if p.strip()]
        if len(parts) != 1 or not parts[0].strip().isdigit():
            raise ValueError(f"num_sampling_steps: arvis supports one evenly spaced section ('100'), got {value!r}")
        return int(parts[0])
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"num_sampling_steps must be an integer, got {value!r}")


__all__ = ["MARDiffusionHead", "DDPMTables", "SAMPLING_SCHEDULES", "cosine_betas", "linear_betas", "spaced_timesteps"]
