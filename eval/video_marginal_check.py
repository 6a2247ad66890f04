#!/usr/bin/env python
"""Two-sample check of MC-SJD against plain AR on a small random video model, at scales the exact lossless
test cannot enumerate: 3 frames of 3x3 tokens, vocabulary 16, CFG 3.0, ragged batches of 100, windows that
span frames, previous-frame distribution drafts.

    python eval/video_marginal_check.py            # prints one line per comparison
    python eval/video_marginal_check.py --shipped  # + the likelihood check on the shipped video model

For every position, a chi-square two-sample test of the token histograms (AR vs the method, 3,000 samples
each, class 1), combined over positions by Fisher's method; the AR-vs-AR line (other seeds) is the null.
A check, not a proof: the proof is tests/pipelines/video/test_video_lossless.py (exact distribution of a 2x2x2 model).

``--shipped`` adds a likelihood check on the shipped video model: 64 clips by AR (two seed sets) and 64 by
MC-SJD (maximal coupling, window 128, previous-frame distribution drafts), classes round robin, CFG 3.0; each
clip scored by the model's own CFG log-likelihood (one teacher-forced forward); Kolmogorov-Smirnov two-sample
tests on the scores, and the mean difference per class pair. A sampler that changed the distribution would
move the likelihoods of what it draws.
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
from tests.pipelines.video.test_video import tiny_video  # noqa: E402

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


def shipped_likelihoods(num: int = 64, batch: int = 16, guidance: float = 3.0) -> None:
    from arvis.eval.token_stats import sampling_distributions
    from arvis.hub import load_pipeline

    pipe, _, _ = load_pipeline("video", torch.float32, "cpu")
    sampling = SamplingConfig(guidance_scale=guidance)
    model, classes = pipe.transformer, len(pipe.class_names)

    @torch.no_grad()
    def scores(method: str, seed_base: int, **options) -> np.ndarray:
        out = []
        for start in range(0, num, batch):
            cond = Condition(class_labels=torch.tensor([(start + i) % classes for i in range(batch)]))
            gens = [torch.Generator().manual_seed(seed_base + start + i) for i in range(batch)]
            tokens, _ = decode(model, cond, sampling, method, gens, **options)
            p = sampling_distributions(model, tokens, cond, sampling)  # what decoding samples from, teacher-forced
            out.append(p.gather(-1, tokens[..., None])[..., 0].clamp_min(1e-30).log().sum(-1))
        return torch.cat(out).numpy()

    ar, ar2 = scores("ar", 1000), scores("ar", 500_000)
    mc = scores("mc-sjd", 1000, window=128, init="previous_frame_distribution")
    for name, other in (("ar vs ar (other seeds)", ar2), ("ar vs mc-sjd window 128", mc)):
        ks = stats.ks_2samp(ar, other)
        print(f"shipped model, {name}: KS p {ks.pvalue:.3f}; mean log-likelihood {ar.mean():.1f} vs "
              f"{other.mean():.1f} (difference {other.mean() - ar.mean():+.1f}, paired by class: sd of the "
              f"differences {np.std(other - ar):.1f}, standard error {np.std(other - ar) / np.sqrt(num):.1f})")


def main() -> int:
    torch.set_num_threads(1)
    model = tiny_video(frames=3, side=3, vocab=VOCAB, head_scale=1.0)
    ar = draw(model, "ar", 0)
    low, fisher = compare(ar, draw(model, "ar", 10**6))
    print(f"ar vs ar (other seeds): min p {low:.2e}, Fisher p {fisher:.2e}")
    for method, options in CASES:
        low, fisher = compare(ar, draw(model, method, 2 * 10**6, **options))
        print(f"{method} {options}: min p {low:.2e}, Fisher p {fisher:.2e}")
    if "--shipped" in sys.argv[1:]:
        shipped_likelihoods()
    return 0


if __name__ == "__main__":
    sys.exit(main())
