"""Continuous speculative decoding on MAR's causal raster variant (exact; the acceptance math is
:mod:`arvis.acceptance.continuous`).

A small *draft* causal MAR (its own transformer and diffusion head) proposes ``γ`` tokens, each with the whole
denoising trajectory its head followed; the *target* causal MAR evaluates the last committed token and the
``γ`` drafts in **one** forward (KV cache), which gives its ``z`` for every window position and the one after;
:func:`~arvis.acceptance.continuous.verify_window_exact` accepts the drafts' trajectories with
``min(1, p(τ)/q(τ))`` and draws the first rejected position from the residual over trajectories. The caches
roll back by position: the next round writes again from the first slot whose token changed (a query at slot
``p`` attends only slots ``≤ p``).

Round by round (per row ``b`` with ``n_b`` committed tokens):

1. draft catch-up: feed the last two committed tokens (slots ``n−2, n−1``; only token 0 in the first round)
   → the draft's ``z`` of position ``n``; then ``γ`` draft samples, feeding each but the last (``γ`` draft
   forwards a round);
2. one target forward over ``[token n−1, d_0 … d_{γ−1}]`` → the target's ``z`` of positions ``n … n+γ``;
3. verify, commit ``num_tokens`` tokens (accepted drafts, then the recovered or bonus token).

Token 0 is sampled by the target from its prefill (one target forward), so every row has ``n ≥ 1``.
Every round drafts a full window of ``γ`` for every row, also near the end of the sequence: positions past
the last token are drafted and verified (the model writes them at its last slot, which no earlier position
attends) but never committed or counted; rows that are done ride along without committing.

Which sampler is the target: the target head with MAR's temperature and a *constant* CFG scale (a window
spans positions, so MAR's per-position linear ramp does not apply), and at step 0 ``x_0 = mean +
final_std · ε``. With ``final_std = 0`` (MAR's own deterministic last step) the method is exact for MAR's
sampler but commits about one token per verify (an accepted trajectory maps to the target's token, not the
draft's: a context break, see :mod:`arvis.acceptance.continuous`); with ``final_std > 0`` whole windows
commit and the method is exact for that slightly smoothed sampler — the AR baseline it is compared with must
use the same ``final_std`` (``MARPipeline(..., final_std=…)`` with ``method="ar"``).

Randomness: one generator drives a batch, or one generator per image: then every random draw of a row comes
from its own generator and the number of draws depends on that row's state alone (full windows, the residual
rounds row by row), so an image does not depend on the batch it is decoded in and batches still decode
together. The published ``cspd`` (masked MAR, below) draws the same way: every row its orders, trajectory
noise and acceptance draws from its own generator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from arvis.acceptance.continuous import (
    DiffusionSampler,
    Trajectory,
    sample_trajectory,
    verify_window_cspd,
    verify_window_exact,
)
from arvis.engine.engine import DecodeEngine
from arvis.engine.stats import BatchStats, DecodeStats, ForwardClock, peak_memory_mb
from arvis.methods.base import DecodingMethod
from arvis.methods.catalog import DecoderKind, MethodInfo, method_info
from arvis.methods.mar import MARStep, check_guidance, mask_schedule
from arvis.methods.registry import register_method
from arvis.models.diffusion_head import MARDiffusionHead, check_temperature
from arvis.models.mar import MARTransformer
from arvis.utils.random import GeneratorArg, RandomStreams


@register_method
@dataclass(frozen=True)
class ContinuousSpeculative(DecodingMethod):
    """Exact continuous speculative decoding on causal MAR (module docstring); needs a MARPipeline with a
    causal transformer and a causal draft (``draft_transformer`` + ``draft_head``)."""

    info: ClassVar[MethodInfo] = method_info("cspd-exact", DecoderKind.CONTINUOUS)
    window: int = 4
    final_std: float = 0.0
    max_rounds: int = 1024

    def __post_init__(self) -> None:
        self._check_declared()

    def run(self, engine: DecodeEngine) -> None:
        raise ValueError(f"method {self.name!r} decodes continuous-token (MAR) models; use it with a MARPipeline "
                         f"whose transformer and draft are causal")


@register_method
@dataclass(frozen=True)
class PublishedCSpD(DecodingMethod):
    """CSpD as published (Wang et al., 2024, arXiv:2411.11925; MarkXCloud/CSpD) on masked MAR — **lossy**.

    The target alone decodes MAR's first iterations (``prefill_ratio`` of ``num_iter``, token pre-filling);
    then a small masked *draft* MAR decodes the iterations, and after every ``window``-th iteration (and
    the last) the target evaluates, in one forward, every position drafted since its last forward,
    conditioned only on the tokens known before them; each drafted token is accepted with the tempered
    final-transition ratio (``tau``) along the trajectory the target follows on the draft's own noise, and a
    rejected one is resampled (up to ``max_tries``; then the target's aligned token, counted in
    ``fallbacks``). Every position of the window is committed (the reference's independent rule): the
    tokens of a masked iteration have no left-to-right factorisation to verify in order, so no rule here is
    exact. Needs a MARPipeline with a masked draft.
    """

    info: ClassVar[MethodInfo] = method_info("cspd", DecoderKind.CONTINUOUS)
    verify_every: int = 8
    prefill_ratio: float = 0.15
    tau: float = 42.0
    max_tries: int = 100

    def __post_init__(self) -> None:
        self._check_declared()

    def run(self, engine: DecodeEngine) -> None:
        raise ValueError(f"method {self.name!r} decodes masked continuous-token (MAR) models; use it with a "
                         f"MARPipeline that has a masked draft")


CONTINUOUS_METHODS = (ContinuousSpeculative, PublishedCSpD)


def _dup(x: torch.Tensor, cfg: bool) -> torch.Tensor:
    return torch.cat([x, x]) if cfg else x


@torch.no_grad()
def decode_causal_speculative(target: MARTransformer, target_head: MARDiffusionHead, draft: MARTransformer,
                              draft_head: MARDiffusionHead, labels: torch.Tensor, *, window: int = 4,
                              final_std: float = 0.0, max_rounds: int = 1024, guidance_scale: float = 1.0,
                              temperature: float = 1.0,
                              generator: torch.Generator | Sequence[torch.Generator] | None = None,
                              on_step: Callable[[MARStep], None] | None = None) -> tuple[torch.Tensor, BatchStats]:
    """Decode ``labels [B]`` with :class:`ContinuousSpeculative` (module docstring).

    Returns:
        ``(tokens [B, L, D], statistics)``: ``target_forwards`` / ``draft_forwards`` per sample, tokens committed
        per target forward, and in ``extra`` the acceptance rate, residual rounds, fallbacks and head steps.
    """
    for model, role in ((target, "transformer"), (draft, "draft_transformer")):
        if not model.is_causal:
            raise ValueError(f"{role}: continuous speculative decoding needs the causal raster variant (causal=True)")
    if (draft.seq_len, draft.token_embed_dim) != (target.seq_len, target.token_embed_dim):
        raise ValueError("draft_transformer: its grid or token channels differ from the transformer's")
    if target_head.num_sampling_steps() != draft_head.num_sampling_steps():
        raise ValueError(f"draft_head: {draft_head.num_sampling_steps()} sampling steps, the target head "
                         f"{target_head.num_sampling_steps()}; trajectories must have the same length")
    check_guidance(guidance_scale)
    check_temperature(temperature)
    if temperature == 0:
        raise ValueError("temperature: continuous speculative decoding compares densities; it needs temperature > 0")
    if isinstance(generator, list | tuple) and len(generator) != labels.shape[0]:
        raise ValueError(f"generator: got {len(generator)} generators for {labels.shape[0]} images")
    return _decode_batch(target, target_head, draft, draft_head, labels, window, final_std, max_rounds,
                         guidance_scale, temperature, generator, on_step)


def _decode_batch(target: MARTransformer, target_head: MARDiffusionHead, draft: MARTransformer,
                  draft_head: MARDiffusionHead, labels: torch.Tensor, gamma: int, final_std: float, max_rounds: int,
                  guidance_scale: float, temperature: float, generator: GeneratorArg,
                  on_step: Callable[[MARStep], None] | None) -> tuple[torch.Tensor, BatchStats]:
    # Full windows for every row every round (module docstring): a row's draws depend on its own state alone.
    device = target.mask_token.device
    t0 = time.perf_counter()
    clock = ForwardClock(device)
    B, L, D = labels.shape[0], target.seq_len, target.token_embed_dim
    cfg = guidance_scale != 1.0
    p = DiffusionSampler(target_head, temperature, guidance_scale)
    q = DiffusionSampler(draft_head, temperature, guidance_scale)

    def conditions(model: MARTransformer) -> torch.Tensor:
        c = model.class_embedding(labels)
        return torch.cat([c, model.class_embedding(None, B)]) if cfg else c

    cache_t, cache_d = target.allocate_cache(2 * B if cfg else B), draft.allocate_cache(2 * B if cfg else B)
    with clock.measure("target"):
        zt = target.prefill(conditions(target), cache_t)  # [R, C]: z of token 0
    with clock.measure("draft"):
        draft.prefill(conditions(draft), cache_d)
    with clock.measure("head"):
        first = sample_trajectory(p, zt[:B], generator=generator, z_uncond=zt[B:] if cfg else None,
                                  final_std=final_std)
    tokens = torch.zeros(B, L, D, device=device)
    tokens[:, 0] = first.token
    n = torch.ones(B, dtype=torch.long, device=device)
    per_forward: list[list[int]] = [[1] for _ in range(B)]
    commit = [[0] + [-1] * (L - 1) for _ in range(B)]
    target_fw, draft_fw = [1] * B, [1] * B
    drafted, accepted_total, rounds_total, fallbacks_total = [0] * B, [0] * B, [0] * B, [0] * B
    batch_target, batch_draft, head_steps = 1, 1, target_head.num_sampling_steps()
    first_round = True
    if on_step is not None:
        on_step(MARStep(0, tokens, torch.arange(L, device=device)[None] < n[:, None]))
    while True:
        n_list = n.tolist()  # host sync: once a round
        active = [k < L for k in n_list]
        if not any(active):
            break
        # 1. draft catch-up and proposals
        if first_round:
            feed, start = tokens[:, :1], torch.zeros(B, dtype=torch.long, device=device)
        else:
            start = n - 2
            feed = tokens.gather(1, (start[:, None] + torch.arange(2, device=device))[..., None].expand(-1, -1, D))
        with clock.measure("draft"):
            zd = draft.forward_tokens(_dup(feed, cfg), _dup(start, cfg), cache_d)[:, -1]
        batch_draft += 1
        drafts, zds = [], []
        for i in range(gamma):
            zds.append(zd)
            with clock.measure("head"):
                traj = sample_trajectory(q, zd[:B], generator=generator, z_uncond=zd[B:] if cfg else None,
                                         final_std=final_std)
            drafts.append(traj)
            if i < gamma - 1:
                pos = (n + i).clamp_max(L - 1)  # past the end (or a finished row): the last slot, never committed
                with clock.measure("draft"):
                    zd = draft.forward_tokens(_dup(traj.token[:, None], cfg), _dup(pos, cfg), cache_d)[:, 0]
                batch_draft += 1
        window = Trajectory.stack(drafts, 1)  # [B, γ]
        z_draft = torch.stack(zds, 1)  # [R, γ, C']
        # 2. one target forward over the last committed token and the drafts
        start_t = n - 1
        last = tokens.gather(1, start_t[:, None, None].expand(-1, 1, D))
        inputs = torch.cat([last, window.token], 1)  # [B, γ+1, D]
        with clock.measure("target"):
            zt = target.forward_tokens(_dup(inputs, cfg), _dup(start_t, cfg), cache_t)  # [R, γ+1, C]
        batch_target += 1
        # 3. verify and commit
        with clock.measure("head"):
            ver = verify_window_exact(p, q, window, zt[:B], z_draft[:B], generator=generator,
                                      z_target_uncond=zt[B:] if cfg else None,
                                      z_draft_uncond=z_draft[B:] if cfg else None, final_std=final_std,
                                      max_rounds=max_rounds)
        counts = ver.num_tokens.tolist()
        acc, rounds, fallbacks = ver.num_accepted.tolist(), ver.resample_rounds.tolist(), ver.fallbacks.tolist()
        for b in range(B):
            if not active[b]:
                continue
            left = L - n_list[b]  # positions past the end are drafted but not counted
            k = min(counts[b], left)
            tokens[b, n_list[b]: n_list[b] + k] = ver.tokens[b, :k]
            for j in range(n_list[b], n_list[b] + k):
                commit[b][j] = target_fw[b]
            per_forward[b].append(k)
            target_fw[b] += 1
            draft_fw[b] += gamma
            drafted[b] += min(gamma, left)
            accepted_total[b] += min(acc[b], left)
            rounds_total[b] += rounds[b]
            fallbacks_total[b] += fallbacks[b]
            n_list[b] += k
        n = torch.tensor(n_list, device=device)
        first_round = False
        if on_step is not None:
            on_step(MARStep(batch_target - 1, tokens, torch.arange(L, device=device)[None] < n[:, None]))
    times = clock.totals()
    latency = time.perf_counter() - t0
    memory = peak_memory_mb(device)
    samples = [DecodeStats(method=ContinuousSpeculative.name, tokens=L, target_forwards=target_fw[b],
                           draft_forwards=draft_fw[b], accepted_per_forward=per_forward[b], commit_forward=commit[b],
                           latency_s=latency, peak_memory_mb=memory,
                           extra={"acceptance_rate": accepted_total[b] / max(drafted[b], 1),
                                  "drafted": drafted[b], "accepted": accepted_total[b],
                                  "resample_rounds": rounds_total[b], "fallbacks": fallbacks_total[b],
                                  "window": gamma, "final_std": final_std, "head_steps_per_token": head_steps,
                                  "head_s": times.get("head", 0.0)})
               for b in range(B)]
    return tokens, BatchStats(samples=samples, batch_target_forwards=batch_target, batch_draft_forwards=batch_draft,
                              latency_s=latency, peak_memory_mb=memory, target_forward_s=times.get("target", 0.0),
                              draft_forward_s=times.get("draft", 0.0))


def method_settings(method: Any) -> dict[str, Any]:
    """The options of a built :class:`ContinuousSpeculative` / :class:`PublishedCSpD` as keyword arguments of
    its decode function."""
    return {o.name: getattr(method, o.name) for o in method.options}


@torch.no_grad()
def decode_masked_cspd(target: MARTransformer, target_head: MARDiffusionHead, draft: MARTransformer,
                       draft_head: MARDiffusionHead, labels: torch.Tensor, *, num_iter: int = 64, verify_every: int = 8,
                       prefill_ratio: float = 0.15, tau: float = 42.0, max_tries: int = 100,
                       guidance_scale: float = 1.0, cfg_schedule: str = "linear", temperature: float = 1.0,
                       generator: torch.Generator | Sequence[torch.Generator] | None = None,
                       on_step: Callable[[MARStep], None] | None = None) -> tuple[torch.Tensor, BatchStats]:
    """:class:`PublishedCSpD` on masked MAR (``labels [B]``; lossy). Returns ``(tokens [B, L, D], statistics)``;
    ``extra`` holds the acceptance rate, resampling tries and fallbacks."""
    for model, role in ((target, "transformer"), (draft, "draft_transformer")):
        if model.is_causal:
            raise ValueError(f"{role}: the published cspd runs on masked MAR (causal=False); use cspd-exact on the "
                             f"causal variant")
    if (draft.seq_len, draft.token_embed_dim) != (target.seq_len, target.token_embed_dim):
        raise ValueError("draft_transformer: its grid or token channels differ from the transformer's")
    if target_head.num_sampling_steps() != draft_head.num_sampling_steps():
        raise ValueError("draft_head: its sampling steps differ from the target head's (aligned trajectories)")
    check_guidance(guidance_scale)
    check_temperature(temperature)
    if temperature == 0:
        raise ValueError("temperature: cspd compares densities; it needs temperature > 0")
    if isinstance(generator, list | tuple) and len(generator) != labels.shape[0]:
        raise ValueError(f"generator: got {len(generator)} generators for {labels.shape[0]} images")
    schedule = mask_schedule(target.seq_len, num_iter, guidance_scale, cfg_schedule)
    device = target.mask_token.device
    t0 = time.perf_counter()
    clock = ForwardClock(device)
    B, L, D = labels.shape[0], target.seq_len, target.token_embed_dim
    streams = RandomStreams(generator, B, device)
    orders = streams.uniform((L,)).argsort(dim=-1)
    cfg = guidance_scale != 1.0

    def conditions(model: MARTransformer) -> torch.Tensor:
        c = model.class_embedding(labels)
        return torch.cat([c, model.class_embedding(None, B)]) if cfg else c

    def z_at(model: MARTransformer, cond: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor, masked: int,
             positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        z = model(_dup(tokens, cfg), _dup(mask, cfg), cond, num_masked=masked)
        index = positions[..., None].expand(-1, -1, z.shape[-1])
        return z[:B].gather(1, index), (z[B:].gather(1, index) if cfg else None)  # [B, k, C] each

    steps = target_head.num_sampling_steps()

    def noise(count: int) -> torch.Tensor:  # [B·count, S+1, D] trajectory noise, each row from its own stream
        return streams.normal((count, steps + 1, D)).reshape(B * count, steps + 1, D)

    cond_t, cond_d = conditions(target), conditions(draft)
    tokens = torch.zeros(B, L, D, device=device)
    mask = torch.ones(B, L, dtype=torch.bool, device=device)
    commit = torch.full((B, L), -1, dtype=torch.long, device=device)
    milestone = num_iter * prefill_ratio
    per_forward: list[int] = []
    masked, verified_masked, verified_mask = L, L, mask.clone()
    pending: list[tuple[torch.Tensor, Trajectory]] = []  # drafted since the last target forward
    draft_forwards = drafted = accepted = tries = fallbacks = 0
    last = max(i for i, (n, _) in enumerate(schedule) if n > 0)
    for step, (count, scale) in enumerate(schedule):
        if count == 0:
            continue
        positions = orders[:, masked - count: masked].sort(dim=-1).values  # [B, k]
        if step <= milestone:  # token pre-filling: the target alone
            with clock.measure("target"):
                zc, zu = z_at(target, cond_t, tokens, mask, masked, positions)
            with clock.measure("head"):
                traj = sample_trajectory(DiffusionSampler(target_head, temperature, scale), zc.reshape(B * count, -1),
                                         noise=noise(count), z_uncond=None if zu is None else zu.reshape(B * count, -1))
            new = traj.token.reshape(B, count, D)
            per_forward.append(count)
        else:
            with clock.measure("draft"):
                zc, zu = z_at(draft, cond_d, tokens, mask, masked, positions)
            draft_forwards += 1
            with clock.measure("head"):
                traj = sample_trajectory(DiffusionSampler(draft_head, temperature, scale), zc.reshape(B * count, -1),
                                         noise=noise(count), z_uncond=None if zu is None else zu.reshape(B * count, -1))
            pending.append((positions, traj.reshape(B, count)))
            new = traj.token.reshape(B, count, D)
            drafted += count
        tokens = tokens.scatter(1, positions[..., None].expand(-1, -1, D), new)
        mask = mask.scatter(1, positions, False)
        masked -= count
        if step > milestone and ((step % verify_every == 0 and step != 0) or step == last):
            window_positions = torch.cat([p for p, _ in pending], 1)  # [B, W]
            drafts = _cat([t for _, t in pending])  # [B, W]
            W = window_positions.shape[1]
            with clock.measure("target"):  # conditioned only on the tokens known before the window
                zc, zu = z_at(target, cond_t, tokens, verified_mask, verified_masked, window_positions)
            pad = lambda z: None if z is None else torch.cat([z, z[:, -1:]], 1)  # noqa: E731 - no bonus token here
            with clock.measure("head"):
                ver = verify_window_cspd(DiffusionSampler(target_head, temperature, scale), drafts, pad(zc),
                                         generator=generator, z_target_uncond=pad(zu), tau=tau, max_tries=max_tries,
                                         independent=True)
            tokens = tokens.scatter(1, window_positions[..., None].expand(-1, -1, D), ver.tokens[:, :W])
            accepted += int(ver.num_accepted.sum())
            tries += int(ver.resample_rounds.sum())
            fallbacks += int(ver.fallbacks.sum())
            per_forward.append(W)
            pending = []
            verified_mask, verified_masked = mask.clone(), masked
            commit.scatter_(1, window_positions, len(per_forward) - 1)
        elif step <= milestone:
            verified_mask, verified_masked = mask.clone(), masked
            commit.scatter_(1, positions, len(per_forward) - 1)
        if on_step is not None:
            on_step(MARStep(step, tokens, ~verified_mask))
    times = clock.totals()
    latency = time.perf_counter() - t0
    memory = peak_memory_mb(device)
    commit_lists = commit.tolist()
    extra = {"acceptance_rate": accepted / max(B * drafted, 1), "drafted": drafted, "accepted": accepted / B,
             "resample_tries": tries / B, "fallbacks": fallbacks / B, "num_iter": num_iter, "verify_every": verify_every,
             "prefill_ratio": prefill_ratio, "tau": tau, "head_steps": L * target_head.num_sampling_steps(),
             "head_s": times.get("head", 0.0)}
    samples = [DecodeStats(method=PublishedCSpD.name, tokens=L, target_forwards=len(per_forward),
                           draft_forwards=draft_forwards, accepted_per_forward=list(per_forward),
                           commit_forward=commit_lists[b], latency_s=latency, peak_memory_mb=memory, extra=dict(extra))
               for b in range(B)]
    return tokens, BatchStats(samples=samples, batch_target_forwards=len(per_forward),
                              batch_draft_forwards=draft_forwards, latency_s=latency, peak_memory_mb=memory,
                              target_forward_s=times.get("target", 0.0), draft_forward_s=times.get("draft", 0.0))


def _cat(parts: list[Trajectory]) -> Trajectory:
    """Windows ``[B, k_i]`` of trajectories side by side → ``[B, Σ k_i]``."""
    return Trajectory(torch.cat([t.states for t in parts], 1), torch.cat([t.noise for t in parts], 1),
                      torch.cat([t.log_prob for t in parts], 1), torch.cat([t.final_transition_std for t in parts], 1),
                      torch.cat([t.log_std_sum for t in parts], 1))


__all__ = ["ContinuousSpeculative", "PublishedCSpD", "CONTINUOUS_METHODS", "decode_causal_speculative",
           "decode_masked_cspd", "method_settings"]
