"""Acceptance of continuous speculative decoding against the number of diffusion-head steps, on toy heads.

The target is the exact DDPM denoiser of a 1-D bimodal mixture; the draft is the same with its modes shifted
by ``--shift`` and reweighted (tests/continuous_fixtures.py). For each number of head steps it prints:

- ``TV x0``: the total variation between the two heads' token distributions (histograms of 10^5 draws each,
  upward-biased by ~0.01 from sampling noise): how close the pair is;
- the exact rule (arvis.acceptance.continuous.verify_window_exact) with MAR's deterministic last step
  (``final_std 0``): acceptance of a trajectory and tokens committed per verification of a γ-window — about
  one, because the target's token at an accepted position is not the drafted token (context break);
- the exact rule with a Gaussian last step (``final_std``): acceptance and tokens per verification;
- the published rule (verify_window_cspd, τ = 42 and τ = 1): acceptance and the Kolmogorov–Smirnov distance
  of its first token to the target's (0.01 is sampling noise at this size; larger is the rule's loss).

Usage: ``python eval/continuous_acceptance.py [--steps 2 4 8 16 32 64] [--shift 0.3] [--n 20000]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arvis.acceptance.continuous import (  # noqa: E402
    DiffusionSampler,
    sample_trajectory,
    verify_window_cspd,
    verify_window_exact,
)
from tests.continuous_fixtures import mixture_pair  # noqa: E402


def histogram_tv(a: torch.Tensor, b: torch.Tensor, bins: int = 200) -> float:
    lo, hi = float(min(a.min(), b.min())), float(max(a.max(), b.max()))
    ha = np.histogram(a.numpy(), bins=bins, range=(lo, hi))[0] / a.numel()
    hb = np.histogram(b.numpy(), bins=bins, range=(lo, hi))[0] / b.numel()
    return 0.5 * float(np.abs(ha - hb).sum())


def row(steps: int, shift: float, n: int, gamma: int, final_std: float, seed: int) -> dict[str, float]:
    tgt, drf = mixture_pair(steps, shift=shift)
    t, q = DiffusionSampler(tgt), DiffusionSampler(drf)
    gen = torch.Generator().manual_seed(seed)
    big = 100_000
    plain = sample_trajectory(t, torch.zeros(big, 1), generator=gen).token[:, 0]
    drafted = sample_trajectory(q, torch.zeros(big, 1), generator=gen).token[:, 0]
    out = {"steps": steps, "tv_x0": histogram_tv(plain, drafted)}
    z_t, z_d = torch.zeros(n, gamma + 1, 1), torch.zeros(n, gamma, 1)
    for key, fs in (("exact0", 0.0), ("exact_fs", final_std)):
        drafts = sample_trajectory(q, torch.zeros(n * gamma, 1), generator=gen, final_std=fs).reshape(n, gamma)
        res = verify_window_exact(t, q, drafts, z_t, z_d, generator=gen, final_std=fs)
        out[f"{key}_accept"] = float(res.accepted.float().mean())
        out[f"{key}_tokens"] = float(res.num_tokens.float().mean())
        out[f"{key}_fallbacks"] = int(res.fallbacks.sum())
    drafts = sample_trajectory(q, torch.zeros(n * gamma, 1), generator=gen).reshape(n, gamma)
    for tau in (42.0, 1.0):
        res = verify_window_cspd(t, drafts, z_t, generator=gen, tau=tau)
        out[f"cspd{tau:g}_accept"] = float(res.accepted.float().mean())
        out[f"cspd{tau:g}_ks"] = float(stats.ks_2samp(res.tokens[:, 0, 0].numpy(), plain[:n].numpy()).statistic)
        out[f"cspd{tau:g}_fallbacks"] = int(res.fallbacks.sum())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--shift", type=float, default=0.3, help="draft modes' shift from the target's")
    parser.add_argument("--n", type=int, default=20_000, help="windows per configuration")
    parser.add_argument("--gamma", type=int, default=4, help="drafts per window")
    parser.add_argument("--final-std", type=float, default=0.1, help="Gaussian last step of the exact variant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if any(s < 2 for s in args.steps):
        parser.error("--steps must all be >= 2")
    torch.set_num_threads(1)
    print(f"draft shift {args.shift}, gamma {args.gamma}, {args.n} windows, seed {args.seed}")
    print(f"| head steps | TV x0 | exact, final_std 0: accept | tokens/verify | exact, final_std {args.final_std:g}: "
          f"accept | tokens/verify | cspd τ=42: accept | KS | cspd τ=1: accept | KS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for steps in args.steps:
        r = row(steps, args.shift, args.n, args.gamma, args.final_std, args.seed)
        print(f"| {steps} | {r['tv_x0']:.3f} | {r['exact0_accept']:.3f} | {r['exact0_tokens']:.2f} | "
              f"{r['exact_fs_accept']:.3f} | {r['exact_fs_tokens']:.2f} | {r['cspd42_accept']:.3f} | "
              f"{r['cspd42_ks']:.3f} | {r['cspd1_accept']:.3f} | {r['cspd1_ks']:.3f} |", flush=True)
        fb = r["exact0_fallbacks"] + r["exact_fs_fallbacks"]
        if fb or r["cspd42_fallbacks"] or r["cspd1_fallbacks"]:
            print(f"  fallbacks: exact {fb}, cspd τ=42 {r['cspd42_fallbacks']}, cspd τ=1 {r['cspd1_fallbacks']}")


if __name__ == "__main__":
    main()
