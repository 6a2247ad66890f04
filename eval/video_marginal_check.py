#!/usr/bin/env python
"""Two-sample check of MC-SJD against plain AR on a small random video model, at scales the exact lossless
test cannot enumerate: 3 frames of 3x3 tokens, vocabulary 16, CFG 3.0, ragged batches of 100, windows that
span frames, previous-frame distribution drafts.

    python eval/video_marginal_check.py            # prints one line per comparison

For every position, a chi-square two-sample test of the token histograms (AR vs the method, 3,000 samples
each, class 1), combined over positions by Fisher's method; the AR-vs-AR line (other seeds) is the null.
A check, not a proof: the proof is tests/test_video_lossless.py (exact distribution of a 2x2x2 model).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from arvis.engine.sampling import SamplingConfig  # noqa: E402
from arvis.methods import decode  # noqa: E402
from arvis.models.protocol import Condition  # noqa: E402
from tests.test_video import tiny_video  # noqa: E402

N, BATCH, VOCAB = 3000, 100, 16
CASES = [("mc-sjd", {"window": 12, "init": "previous_frame_distribution"}),
         ("mc-sjd", {"window": 12, "init": "random"}),
         ("mc-sjd", {"window": 20, "init": "previous_frame_distribution"})]


def draw(model, method: str, seed_base: int, **options) -> np.ndarray:
    out = []
    for start in range(0, N, BATCH):
        gens = [torch.Generator().manual_seed(seed_base + start + i) for i in range(BATCH)]
        tokens, _ = decode(model, Condition(class_labels=torch.ones(BATCH, dtype=torch.long)),
                           SamplingConfig(guidance_scale=3.0), method, gens, **options)
        out.append(tokens)
    return torch.cat(out).numpy()


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(smallest per-position p, Fisher-combined p) of chi-square two-sample tests, position by position."""
    ps = []
    for j in range(a.shape[1]):
        ca, cb = np.bincount(a[:, j], minlength=VOCAB), np.bincount(b[:, j], minlength=VOCAB)
        keep = (ca + cb) > 0
        ps.append(stats.chi2_contingency(np.stack([ca[keep], cb[keep]]))[1])
    return float(min(ps)), float(stats.combine_pvalues(ps)[1])


def main() -> int:
    torch.set_num_threads(1)
    model = tiny_video(frames=3, side=3, vocab=VOCAB, head_scale=1.0)
    ar = draw(model, "ar", 0)
    low, fisher = compare(ar, draw(model, "ar", 10**6))
    print(f"ar vs ar (other seeds): min p {low:.2e}, Fisher p {fisher:.2e}")
    for method, options in CASES:
        low, fisher = compare(ar, draw(model, method, 2 * 10**6, **options))
        print(f"{method} {options}: min p {low:.2e}, Fisher p {fisher:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
