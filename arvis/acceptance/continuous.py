"""Continuous speculative decoding for AR models whose tokens are sampled by a per-token diffusion head
(MAR, Li et al., 2024, arXiv:2406.11838; CSpD, Wang et al., 2024, arXiv:2411.11925).

Glossary (docs/methods.md, "Continuous speculative decoding"):

- *head*: an :class:`arvis.models.protocol.DiffusionHead` with ``S = num_sampling_steps()`` Gaussian
  transitions, steps ``S−1 … 0``; step 0 is deterministic (its std is 0: ``x_0`` = its mean).
- *trajectory* ``[..., S+1, D]``: ``states[..., 0] = x_S ~ N(0, I)``, ``states[..., k+1]`` is the output
  of step ``S−1−k``, ``states[..., S] = x_0`` is the *token*.
- *trajectory noise* ``[..., S+1, D]`` standard normal: ``noise[..., 0]`` is ``x_S``, ``noise[..., k+1]``
  the ε of step ``S−1−k``. Two heads driven by the same noise follow *aligned* trajectories (CSpD).
- *log density* of a trajectory under a head: the sum of its Gaussian transition log densities, in fp32.
  ``x_S``'s ``N(0, I)`` term is left out (it is the same under every head, so it cancels in every
  ratio); the deterministic step 0 contributes nothing — unless ``final_std > 0``, below.
- *target* ``p`` / *draft* ``q``: the target's and the draft's head, each with its own conditioning
  ``z`` (and sampling settings, :class:`DiffusionSampler`).

Two acceptance rules:

- **exact** (:func:`verify_window_exact`): a drafted trajectory is accepted with probability
  ``min(1, p(τ)/q(τ))`` over ``x_S … x_1``; on rejection a trajectory is drawn from the residual
  ``max(0, p − q)`` by rejection from ``p`` (propose ``y ~ p``, keep it with ``1 − min(1, q(y)/p(y))``).
  The kept trajectory then follows ``p`` exactly, so the token the *target* maps it to — its step-0 mean
  at ``x_1`` — follows the target head's distribution exactly. That token is generally not the draft's
  (the draft's step 0 maps ``x_1`` with its own mean), and later window positions were conditioned on
  the draft's token: the window then ends at that position (a *context break*). With ``final_std > 0``
  both heads add ``N(0, final_std²)`` at step 0, the token is part of the trajectory, the accepted token
  *is* the drafted one and whole windows commit — exact for that (slightly smoothed) sampler.
- **cspd** as published (:func:`verify_window_cspd`, lossy): Gaussian densities of the final transition
  along aligned trajectories, a ratio tempered by ``tau`` and a factor from the per-step std sums,
  resampling by up to ``max_tries`` proposals from the target's final Gaussian; where every try fails,
  the target's own aligned token is taken (the reference leaves a zero token) and counted.

Everything here is vectorised over batch and window: one head call per sampling step covers every
position of a window (and the proposals drawn for it); host synchronisation happens only to decide
whether rare extra residual rounds are needed. Randomness comes only from the caller's generator: one for
the batch, or one per sample (then every sample's result is independent of the batch around it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from arvis.acceptance.speculative import leading_accepted
from arvis.utils.random import GeneratorArg, RandomStreams

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# A head is an arvis.models.protocol.DiffusionHead. Acceptance sits below arvis/models and may not import it
# (docs/architecture.md, tests/project/test_layers.py), so a head is checked by the members the protocol names.
_HEAD_MEMBERS = ("token_dim", "num_sampling_steps", "transition")


# ----------------------------------------------------------------------------------------------------
# Model-free math
# ----------------------------------------------------------------------------------------------------

def gaussian_log_density(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``log N(x; mean, diag(std²))`` summed over the last dimension, fp32: ``[..., D]`` → ``[...]``."""
    x, mean, std = x.float(), mean.float(), std.float()
    return (-0.5 * ((x - mean) / std) ** 2 - std.log() - _LOG_SQRT_2PI).sum(-1)


def exact_accept(log_p: torch.Tensor, log_q: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``U < min(1, p/q)`` in log space: ``[...]`` → ``[...]`` bool."""
    return uniform.float().log() < (log_p.float() - log_q.float())


def residual_keep_probability(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """``1 − min(1, q(y)/p(y))`` for a proposal ``y ~ p``: keeping it with this probability draws from
    ``normalize(max(0, p − q))`` (its acceptance rate per proposal is ``TV(p, q)``)."""
    return -torch.expm1((log_q.float() - log_p.float()).clamp_max(0.0))


def cspd_log_ratio(x: torch.Tensor, mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor,
                   std_q: torch.Tensor, log_std_sum_p: torch.Tensor, log_std_sum_q: torch.Tensor,
                   tau: float) -> torch.Tensor:
    """The published (CSpD) acceptance log-ratio of a drafted token ``x [..., D]`` — *not* a density ratio.

    Gaussians of the final transition (``mean``, ``std [..., D]``) with the quadratic terms tempered by
    ``tau``; the normalising factors ``∏ std_q / ∏ std_p``; the factor ``F = exp(Σ log std_p − Σ log std_q)``
    over the earlier stochastic steps (``log_std_sum [...]``). ``tau = 1`` still leaves ``F`` inverted
    with respect to a trajectory density ratio, so no ``tau`` makes it exact.
    """
    x, tau2 = x.float(), float(tau) ** 2
    quad_p = (((x - mean_p.float()) / std_p.float()) ** 2).sum(-1) / tau2
    quad_q = (((x - mean_q.float()) / std_q.float()) ** 2).sum(-1) / tau2
    norm = std_q.float().log().sum(-1) - std_p.float().log().sum(-1)
    return -0.5 * quad_p + 0.5 * quad_q + norm + (log_std_sum_p.float() - log_std_sum_q.float())


def cspd_keep_probability(y: torch.Tensor, mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor,
                          std_q: torch.Tensor, log_std_sum_p: torch.Tensor,
                          log_std_sum_q: torch.Tensor) -> torch.Tensor:
    """The published resampling test of a proposal ``y ~ N(mean_p, std_p²)``: keep it with
    ``max(0, 1 − q(y) / (F·p(y)))``, untempered final-transition Gaussians, ``F`` as in :func:`cspd_log_ratio`."""
    log_p = gaussian_log_density(y, mean_p, std_p)
    log_q = gaussian_log_density(y, mean_q, std_q)
    log_f = log_std_sum_p.float() - log_std_sum_q.float()
    return -torch.expm1((log_q - log_p - log_f).clamp_max(0.0))


def context_consistent(target_token: torch.Tensor, draft_token: torch.Tensor, final_std: float) -> torch.Tensor:
    """Whether an accepted position keeps the rest of the window valid: ``[..., D]`` → ``[...]`` bool.

    The later positions were conditioned on the drafted token, so the target's token must be that token:
    always with ``final_std > 0`` (the token is part of the accepted trajectory), else only where the two
    heads' step-0 means coincide exactly."""
    if final_std > 0:
        return torch.ones(target_token.shape[:-1], dtype=torch.bool, device=target_token.device)
    return (target_token == draft_token).all(-1)


def first_true(mask: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the first true entry along ``dim`` and whether there is one (no host sync)."""
    any_true = mask.any(dim)
    return mask.int().argmax(dim), any_true


# ----------------------------------------------------------------------------------------------------
# Trajectories (model calls only through the DiffusionHead protocol)
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DiffusionSampler:
    """A diffusion head (an :class:`arvis.models.protocol.DiffusionHead`) with the settings it is sampled with
    (MAR's head temperature, CFG scale)."""

    head: Any
    temperature: float = 1.0
    guidance_scale: float = 1.0

    def __post_init__(self) -> None:
        missing = [m for m in _HEAD_MEMBERS if not hasattr(self.head, m)]
        if missing:
            raise TypeError(f"head must implement DiffusionHead ({', '.join(_HEAD_MEMBERS)}); "
                            f"{type(self.head).__name__} lacks {', '.join(missing)}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature must be finite and > 0, got {self.temperature}")
        if not math.isfinite(self.guidance_scale):
            raise ValueError(f"guidance_scale must be finite, got {self.guidance_scale}")

    @property
    def steps(self) -> int:
        return int(self.head.num_sampling_steps())


@dataclass(frozen=True)
class Trajectory:
    """Trajectories of one head, any leading shape ``[...]`` (e.g. ``[B, γ]`` for a window).

    Attributes:
        states: ``[..., S+1, D]`` ``x_S … x_0`` (module docstring); ``states[..., -1, :]`` is the token.
        noise: ``[..., S+1, D]`` the standard normal noise that drove a sampled trajectory (zeros where
            the states were given rather than sampled).
        log_prob: ``[...]`` log density of ``x_S … x_1`` (and ``x_0`` when ``final_std > 0``) under the
            head that produced or scored it, without ``x_S``'s ``N(0, I)`` term.
        final_transition_std: ``[..., D]`` the std of step 1, the last stochastic transition (CSpD).
        log_std_sum: ``[...]`` ``Σ log std`` over steps ``S−1 … 1`` and dimensions (CSpD's factor).
    """

    states: torch.Tensor
    noise: torch.Tensor
    log_prob: torch.Tensor
    final_transition_std: torch.Tensor
    log_std_sum: torch.Tensor

    @property
    def token(self) -> torch.Tensor:
        """``[..., D]`` the token ``x_0``."""
        return self.states[..., -1, :]

    def reshape(self, *shape: int) -> Trajectory:
        """The same trajectories with leading shape ``shape``."""
        return Trajectory(self.states.reshape(*shape, *self.states.shape[-2:]),
                          self.noise.reshape(*shape, *self.noise.shape[-2:]), self.log_prob.reshape(shape),
                          self.final_transition_std.reshape(*shape, self.final_transition_std.shape[-1]),
                          self.log_std_sum.reshape(shape))

    def index(self, idx) -> Trajectory:
        """Select along the leading dimensions (``idx`` as for a tensor's leading dimensions)."""
        return Trajectory(self.states[idx], self.noise[idx], self.log_prob[idx], self.final_transition_std[idx],
                          self.log_std_sum[idx])

    @staticmethod
    def stack(trajectories: list[Trajectory], dim: int = 1) -> Trajectory:
        """Stack per-position trajectories ``[B]`` into a window ``[B, γ]`` (``dim`` among leading dims)."""
        return Trajectory._join(torch.stack, trajectories, dim)

    @staticmethod
    def cat(trajectories: list[Trajectory], dim: int = 1) -> Trajectory:
        """Windows side by side: ``[B, k_i]`` each → ``[B, Σ k_i]`` (``dim`` among leading dims)."""
        return Trajectory._join(torch.cat, trajectories, dim)

    @staticmethod
    def _join(op: Any, trajectories: list[Trajectory], dim: int) -> Trajectory:
        if not trajectories:
            raise ValueError(f"Trajectory.{op.__name__}: no trajectories")
        return Trajectory(*(op([getattr(t, f.name) for t in trajectories], dim) for f in fields(Trajectory)))


def trajectory_noise(rows: int, steps: int, dim: int, generator: GeneratorArg,
                     device: torch.device | str = "cpu") -> torch.Tensor:
    """``[rows, steps+1, dim]`` standard normal trajectory noise (fp32) from one generator, or one per row."""
    return RandomStreams(generator, rows, device).normal((steps + 1, dim))


def _check_final_std(final_std: float) -> float:
    if not (math.isfinite(final_std) and final_std >= 0):
        raise ValueError(f"final_std must be finite and >= 0, got {final_std}")
    return float(final_std)


def run_chain(sampler: DiffusionSampler, z: torch.Tensor, noise: torch.Tensor, *,
              z_uncond: torch.Tensor | None = None, given: torch.Tensor | None = None,
              follow: torch.Tensor | None = None, final_std: float = 0.0) -> Trajectory:
    """Run a head's chain over ``N`` rows, one head call per sampling step for all rows.

    Rows where ``follow`` is true are *scored*: their states ``x_S … x_1`` (and ``x_0`` when ``final_std >
    0``) are taken from ``given`` and their log density under this head is computed; with ``final_std = 0``
    their token is this head's step-0 mean at the given ``x_1`` (the token this head maps them to). Other
    rows are *sampled* with ``noise``.

    Args:
        sampler: the head and its sampling settings.
        z: ``[N, C]`` conditioning; ``z_uncond`` ``[N, C]`` for CFG.
        noise: ``[N, S+1, D]`` trajectory noise (ignored on followed rows).
        given: ``[N, S+1, D]`` states to score, with ``follow`` ``[N]`` bool (``None``: sample every row).
        final_std: std of the Gaussian both heads add at step 0 (0: MAR's deterministic last step).

    Returns:
        :class:`Trajectory` ``[N]``.
    """
    final_std = _check_final_std(final_std)
    steps = sampler.steps
    rows, width, dim = noise.shape
    if width != steps + 1:
        raise ValueError(f"noise must be [N, {steps + 1}, D] for a {steps}-step head, got {tuple(noise.shape)}")
    if dim != sampler.head.token_dim:
        raise ValueError(f"trajectories have token dim {dim}, the head's token_dim is {sampler.head.token_dim}")
    if z.shape[0] != rows:
        raise ValueError(f"z has {z.shape[0]} rows, noise has {rows}")
    noise = noise.float()
    if given is not None:
        if follow is None:
            follow = torch.ones(rows, dtype=torch.bool, device=noise.device)
        given = given.float()
        keep = follow[:, None]  # [N, 1]
        x = torch.where(keep, given[:, 0], noise[:, 0])
    else:
        x = noise[:, 0]
    states = [x]
    log_prob = torch.zeros(rows, dtype=torch.float32, device=noise.device)
    log_std_sum = torch.zeros_like(log_prob)
    final_transition_std = torch.ones_like(x)
    for k in range(steps):
        step = steps - 1 - k
        mean, std = sampler.head.transition(x, step, z, temperature=sampler.temperature,
                                            guidance_scale=sampler.guidance_scale, z_uncond=z_uncond)
        mean = mean.float()
        if step == 0:
            std = torch.full_like(mean, final_std)  # the protocol's step 0 is deterministic
        else:
            std = std.float().expand_as(mean)
        nxt = mean + std * noise[:, k + 1]
        if given is not None and (step > 0 or final_std > 0):
            nxt = torch.where(keep, given[:, k + 1], nxt)
        if step > 0 or final_std > 0:
            log_prob = log_prob + gaussian_log_density(nxt, mean, std)
        if step > 0:
            log_std_sum = log_std_sum + std.log().sum(-1)
        if step == 1:
            final_transition_std = std
        states.append(nxt)
        x = nxt
    if given is not None:
        noise = torch.where(follow[:, None, None], torch.zeros_like(noise), noise)
    return Trajectory(torch.stack(states, 1), noise, log_prob, final_transition_std, log_std_sum)


def sample_trajectory(sampler: DiffusionSampler, z: torch.Tensor, *, generator: GeneratorArg = None,
                      noise: torch.Tensor | None = None, z_uncond: torch.Tensor | None = None,
                      final_std: float = 0.0) -> Trajectory:
    """Draw ``N`` trajectories (``z [N, C]``) with noise from ``generator`` (one, or one per row) or the given
    ``noise [N, S+1, D]`` (pass the same noise to two heads for aligned trajectories).
    Returns :class:`Trajectory` ``[N]``."""
    if noise is None:
        noise = trajectory_noise(z.shape[0], sampler.steps, sampler.head.token_dim, generator, z.device)
    return run_chain(sampler, z, noise, z_uncond=z_uncond, final_std=final_std)


def score_trajectory(sampler: DiffusionSampler, states: torch.Tensor, z: torch.Tensor, *,
                     z_uncond: torch.Tensor | None = None, final_std: float = 0.0) -> Trajectory:
    """Log density of given trajectories ``states [N, S+1, D]`` under a head (``z [N, C]``); the returned
    token is the head's own step-0 mean at ``x_1`` when ``final_std = 0``."""
    return run_chain(sampler, z, torch.zeros_like(states, dtype=torch.float32), z_uncond=z_uncond, given=states,
                     final_std=final_std)


# ----------------------------------------------------------------------------------------------------
# Window verification
# ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContinuousVerification:
    """The outcome of verifying a window of ``γ`` drafted tokens for ``B`` samples.

    Attributes:
        tokens: ``[B, γ+1, D]`` the tokens to commit are ``tokens[b, :num_tokens[b]]``: accepted tokens,
            then a recovered (residual) or bonus token. Entries beyond ``num_tokens`` are target samples
            of no use (never zeros).
        accepted: ``[B, γ]`` bool, each draft's accept test.
        num_accepted: ``[B]`` int64, committed drafts (the leading accepted run; ``independent`` CSpD: all
            accepted positions).
        num_tokens: ``[B]`` int64, tokens to commit: ``num_accepted + 1`` with a recovered or bonus token,
            ``num_accepted`` after a context break (exact rule, ``final_std = 0``), ``γ`` (independent CSpD).
        bonus: ``[B]`` bool, every draft was accepted and the target's token after the window was drawn.
        resample_rounds: ``[B]`` int64, residual proposals tried (exact) / resampling tries (CSpD).
        fallbacks: ``[B]`` int64, positions where resampling gave up and the fallback token was taken.
    """

    tokens: torch.Tensor
    accepted: torch.Tensor
    num_accepted: torch.Tensor
    num_tokens: torch.Tensor
    bonus: torch.Tensor
    resample_rounds: torch.Tensor
    fallbacks: torch.Tensor


def _check_window(drafts: Trajectory, z_target: torch.Tensor, steps: int) -> tuple[int, int, int]:
    if drafts.states.dim() != 4:
        raise ValueError(f"drafts.states must be [B, gamma, S+1, D], got {tuple(drafts.states.shape)}")
    b, gamma, width, dim = drafts.states.shape
    if width != steps + 1:
        raise ValueError(f"drafts have {width - 1} steps, the target head {steps}")
    if z_target.dim() != 3 or z_target.shape[:2] != (b, gamma + 1):
        raise ValueError(f"z_target must be [B, gamma+1, C] = [{b}, {gamma + 1}, C], got {tuple(z_target.shape)}")
    return b, gamma, dim


def _flat(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.reshape(-1, t.shape[-1])


def _at(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``t[b, index[b]]`` for ``t [B, L, ...]``, ``index [B]``."""
    return t[torch.arange(t.shape[0], device=t.device), index]


def verify_window_exact(target: DiffusionSampler, draft: DiffusionSampler, drafts: Trajectory,
                        z_target: torch.Tensor, z_draft: torch.Tensor, *, generator: GeneratorArg,
                        z_target_uncond: torch.Tensor | None = None, z_draft_uncond: torch.Tensor | None = None,
                        final_std: float = 0.0, max_rounds: int = 1024, round_chunk: int = 8
                        ) -> ContinuousVerification:
    """Exact (lossless) verification of a causal window of drafted trajectories.

    Accept each drafted trajectory with ``min(1, p(τ)/q(τ))``; commit the leading accepted run, then the
    recovered token at the first rejection (a draw from ``max(0, p − q)`` over trajectories, by rejection
    from ``p``), or the bonus token when every draft passed. With ``final_std = 0`` an accepted position
    whose target token differs from the drafted token ends the window there (the later positions were
    conditioned on the drafted token): nothing is recovered after it.

    Head calls: the target's chain over the window (``S`` calls: every draft scored, one proposal per position
    drawn), then the draft's chain over the rows that recover, at the position they recover (``S`` calls,
    skipped when no row recovers: the draft's density is needed only for the residual's keep test).

    Residual draws: one proposal per position comes with the main pass (free of extra head calls); rows
    whose first proposal fails draw ``round_chunk`` proposals at a time until one is kept or
    ``max_rounds`` were tried (one host synchronisation per chunk). A row out of rounds takes its last
    target proposal and is counted in ``fallbacks``: that row's position then deviates from ``p`` by at most
    ``β(1−β)^K ≤ 1/(e(K+1))`` in TV (``β = TV(p, q)``, ``K = max_rounds``) — 3.6e-4 at the default, and
    far less unless ``β`` is near ``1/K``.

    Args:
        target, draft: the two heads and their sampling settings (same steps and token dim).
        drafts: :class:`Trajectory` ``[B, γ]`` drawn from ``draft`` with ``z_draft`` (and ``final_std``).
        z_target: ``[B, γ+1, C]`` the target's conditioning of the window and the position after it.
        z_draft: ``[B, γ, C']`` the draft's conditioning the drafts were drawn with.
        generator: the caller's generator, or one per sample (all randomness).
        z_target_uncond, z_draft_uncond: CFG's unconditional conditionings, same shapes.
        final_std: the std both heads add at step 0 (module docstring).
        max_rounds: residual proposals per position before the fallback (≥ 1).
        round_chunk: proposals drawn per extra round (≥ 1).

    Returns:
        :class:`ContinuousVerification`.
    """
    final_std = _check_final_std(final_std)
    if max_rounds < 1 or round_chunk < 1:
        raise ValueError(f"max_rounds and round_chunk must be >= 1, got {max_rounds}, {round_chunk}")
    steps = target.steps
    if draft.steps != steps:
        raise ValueError(f"target and draft heads must have the same number of steps, got {steps}, {draft.steps}")
    b, gamma, dim = _check_window(drafts, z_target, steps)
    if z_draft.shape[:2] != (b, gamma):
        raise ValueError(f"z_draft must be [B, gamma, C] = [{b}, {gamma}, C], got {tuple(z_draft.shape)}")
    device = z_target.device
    n, m = b * gamma, b * (gamma + 1)

    # every random draw of the main pass, in a fixed order
    streams = RandomStreams(generator, b, device)
    uniform = streams.uniform((gamma,))
    proposal_noise = streams.normal((gamma + 1, steps + 1, dim)).reshape(m, steps + 1, dim)
    keep_uniform = streams.uniform((gamma,))

    # target: score the drafts [N] and draw one proposal per position [M] (the last column is the bonus)
    states = drafts.states.reshape(n, steps + 1, dim)
    given = torch.cat([states, torch.zeros_like(proposal_noise)])
    follow = torch.cat([torch.ones(n, dtype=torch.bool, device=device),
                        torch.zeros(m, dtype=torch.bool, device=device)])
    z_p = torch.cat([_flat(z_target[:, :gamma]), _flat(z_target)])
    zu_p = None if z_target_uncond is None else torch.cat([_flat(z_target_uncond[:, :gamma]), _flat(z_target_uncond)])
    tp = run_chain(target, z_p, torch.cat([torch.zeros_like(states), proposal_noise]), z_uncond=zu_p,
                   given=given, follow=follow, final_std=final_std)
    log_p = tp.log_prob[:n].reshape(b, gamma)
    target_token = tp.token[:n].reshape(b, gamma, dim)  # what the target maps each accepted draft to
    proposals = tp.index(slice(n, None)).reshape(b, gamma + 1)

    accepted = exact_accept(log_p, drafts.log_prob, uniform)  # [B, γ]
    consistent = context_consistent(target_token, drafts.token, final_std)
    run = leading_accepted(accepted & consistent)  # [B] accepted positions whose context stays valid
    full = run == gamma
    at = run.clamp_max(gamma - 1)
    broken = ~full & _at(accepted, at)  # accepted, but its token differs from the drafted one
    recover = ~full & ~broken  # rejected at position `run`
    rows = torch.arange(b, device=device)

    # draft: density of the residual proposal, needed only where a row recovers (its position `at`), so
    # the draft's chain runs over [B] rows, and not at all when no row recovers (host sync: one bool). The
    # head dominates a decode on small models, and this chain is S sequential head calls.
    kept = torch.zeros(b, dtype=torch.bool, device=device)
    if bool(recover.any()):
        zu_q = None if z_draft_uncond is None else z_draft_uncond[rows, at]
        log_q_proposal = score_trajectory(draft, proposals.states[rows, at], z_draft[rows, at], z_uncond=zu_q,
                                          final_std=final_std).log_prob  # [B]
        kept = _at(keep_uniform, at) < residual_keep_probability(_at(proposals.log_prob, at), log_q_proposal)

    tokens = proposals.token.clone()  # [B, γ+1, D]; column γ is the bonus
    positions = torch.arange(gamma + 1, device=device)
    before = positions[None, :gamma] < (run + broken.long())[:, None]  # committed accepted positions
    tokens[:, :gamma] = torch.where(before[..., None], target_token, tokens[:, :gamma])
    rounds = recover.long()
    fallbacks = torch.zeros(b, dtype=torch.long, device=device)

    # rows whose first residual proposal was not kept draw more (host sync: rare, once per chunk)
    pending = recover & ~kept
    if max_rounds == 1:
        fallbacks = pending.long()  # the first proposal (a target sample) stays
    elif bool(pending.any()):
        extra_tokens, extra_rounds, failed = _residual_rounds(
            target, draft, pending, at, tokens[rows, at], z_target, z_draft, z_target_uncond, z_draft_uncond,
            streams, final_std, max_rounds - 1, round_chunk)
        tokens[rows, at] = extra_tokens
        rounds = rounds + extra_rounds
        fallbacks = failed.long()

    num_accepted = run + broken.long()
    num_tokens = num_accepted + (recover | full).long()
    return ContinuousVerification(tokens, accepted, num_accepted, num_tokens, full, rounds, fallbacks)


def _residual_rounds(target: DiffusionSampler, draft: DiffusionSampler, pending: torch.Tensor, at: torch.Tensor,
                     current: torch.Tensor, z_target: torch.Tensor, z_draft: torch.Tensor, z_target_uncond: torch.Tensor | None,
                     z_draft_uncond: torch.Tensor | None, streams: RandomStreams, final_std: float,
                     max_rounds: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Further residual proposals (``max_rounds ≥ 1`` of them) for the rows in ``pending [B]`` at positions
    ``at [B]``, whose tokens are now ``current [B, D]``.

    Returns the tokens ``[B, D]`` (``current`` outside ``pending``; else the kept proposal or, out of rounds,
    the last one), the proposals tried ``[B]`` and whether the row fell back ``[B]``."""
    b = pending.shape[0]
    device = pending.device
    token_dim = target.head.token_dim
    tokens = current.clone()
    tried = torch.zeros(b, dtype=torch.long, device=device)
    failed = torch.zeros(b, dtype=torch.bool, device=device)
    rows = pending.nonzero().squeeze(1)  # host sync: which rows still need a residual draw
    done = 0
    while rows.numel() > 0 and done < max_rounds:
        r = min(chunk, max_rounds - done)
        pos = at[rows]
        zp = z_target[rows, pos].repeat_interleave(r, 0)
        zq = z_draft[rows, pos].repeat_interleave(r, 0)
        zpu = None if z_target_uncond is None else z_target_uncond[rows, pos].repeat_interleave(r, 0)
        zqu = None if z_draft_uncond is None else z_draft_uncond[rows, pos].repeat_interleave(r, 0)
        sample_ids = rows.tolist()  # host ints: whose streams draw (per-sample generators)
        noise = streams.normal((r, target.steps + 1, token_dim), rows=sample_ids).reshape(-1, target.steps + 1,
                                                                                          token_dim)
        u = streams.uniform((r,), rows=sample_ids).reshape(-1)
        y = sample_trajectory(target, zp, noise=noise, z_uncond=zpu, final_std=final_std)
        log_q = score_trajectory(draft, y.states, zq, z_uncond=zqu, final_std=final_std).log_prob
        keep = (u < residual_keep_probability(y.log_prob, log_q)).reshape(-1, r)  # [P, r]
        first, found = first_true(keep, 1)
        last = done + r >= max_rounds
        take = found | last
        chosen = y.token.reshape(-1, r, token_dim)[torch.arange(rows.numel(), device=device),
                                                  torch.where(found, first, r - 1)]
        tokens[rows] = torch.where(take[:, None], chosen, tokens[rows])
        tried[rows] += torch.where(found, first + 1, torch.full_like(first, r))
        failed[rows] = ~found & last
        rows = rows[~take]
        done += r
    return tokens, tried, failed


def verify_window_cspd(target: DiffusionSampler, drafts: Trajectory, z_target: torch.Tensor, *,
                       generator: GeneratorArg, z_target_uncond: torch.Tensor | None = None,
                       tau: float = 42.0, max_tries: int = 100, independent: bool = False,
                       ) -> ContinuousVerification:
    """CSpD's published verification (lossy): tempered final-transition ratio on aligned trajectories.

    The target runs its chain on the drafts' own noise (trajectory alignment) with its conditioning; the
    draft's final transition is read from ``drafts``. Accept with ``min(1, exp(cspd_log_ratio))``; a
    rejected position draws up to ``max_tries`` proposals ``y ~ N(μ_p, σ_p²)`` kept with
    :func:`cspd_keep_probability`; where every try fails, the target's aligned token (a sample of the target
    head) is taken and counted in ``fallbacks``.

    Args:
        target: the target head and its settings.
        drafts: :class:`Trajectory` ``[B, γ]`` from the draft head with ``final_std = 0`` and with the noise
            recorded (``drafts.noise``), which the target reuses.
        z_target: ``[B, γ+1, C]`` (the last column is for the bonus token).
        generator: the caller's generator, or one per sample.
        z_target_uncond: CFG's unconditional conditioning, same shape.
        tau: the reference's tempering (its ``inner_temperature``, 42).
        max_tries: resampling proposals per rejected position (the reference's 100).
        independent: commit every position (accepted draft or resampled), as the reference does for the
            tokens of one MAR step; otherwise the causal rule (leading accepted run, then one recovered or
            bonus token).

    Returns:
        :class:`ContinuousVerification`.
    """
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and > 0, got {tau}")
    if max_tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries}")
    steps = target.steps
    if steps < 2:
        raise ValueError(f"the published rule needs a head with >= 2 steps (a stochastic final transition), got {steps}")
    b, gamma, dim = _check_window(drafts, z_target, steps)
    device = z_target.device

    streams = RandomStreams(generator, b, device)
    uniform = streams.uniform((gamma,))
    bonus_noise = streams.normal((steps + 1, dim))
    tries = streams.normal((gamma, max_tries, dim)).permute(2, 0, 1, 3)  # [T, B, γ, D]
    try_uniform = streams.uniform((gamma, max_tries)).permute(2, 0, 1)  # [T, B, γ]

    noise = torch.cat([drafts.noise.reshape(b, gamma, steps + 1, dim), bonus_noise[:, None]], 1)
    tp = sample_trajectory(target, _flat(z_target), noise=noise.reshape(-1, steps + 1, dim),
                           z_uncond=_flat(z_target_uncond)).reshape(b, gamma + 1)
    mean_p = tp.token[:, :gamma]
    std_p = tp.final_transition_std[:, :gamma]
    x = drafts.token
    log_ratio = cspd_log_ratio(x, mean_p, std_p, x, drafts.final_transition_std, tp.log_std_sum[:, :gamma],
                               drafts.log_std_sum, tau)
    accepted = uniform.log() < log_ratio  # [B, γ]

    y = mean_p + std_p * tries  # [T, B, γ, D]
    keep = try_uniform < cspd_keep_probability(y, mean_p, std_p, x, drafts.final_transition_std,
                                               tp.log_std_sum[:, :gamma], drafts.log_std_sum)
    first, found = first_true(keep, 0)  # [B, γ]
    resampled = torch.gather(y, 0, first[None, ..., None].expand(1, b, gamma, dim))[0]
    resampled = torch.where(found[..., None], resampled, mean_p)  # fallback: the target's aligned token
    used = torch.where(found, first + 1, torch.full_like(first, max_tries))
    position_tokens = torch.where(accepted[..., None], x, resampled)  # [B, γ, D]

    tokens = torch.cat([position_tokens, tp.token[:, gamma:]], 1)
    if independent:
        rejected = ~accepted
        return ContinuousVerification(tokens, accepted, accepted.long().sum(-1),
                                      torch.full((b,), gamma, dtype=torch.long, device=device),
                                      torch.zeros(b, dtype=torch.bool, device=device),
                                      (used * rejected).sum(-1), (~found & rejected).long().sum(-1))
    run = leading_accepted(accepted)
    full = run == gamma
    at = run.clamp_max(gamma - 1)
    recover = ~full
    return ContinuousVerification(tokens, accepted, run, run + 1, full, _at(used, at) * recover,
                                  (~_at(found, at) & recover).long())
