"""Defaults of the evaluation commands, in one light module (no torch): the library applies them and the
command line's help text prints them (docs/cli.md, docs/measurement.md)."""

from __future__ import annotations

# arvis bench (docs/measurement.md): a measurement is the median of >= MIN_REPEATS interleaved rounds after
# BENCH_WARMUP untimed ones; --quick runs QUICK_WARMUP + QUICK_REPEATS and is labelled as no measurement.
MIN_REPEATS = 5
BENCH_WARMUP = 1
BENCH_IMAGES = 2
QUICK_IMAGES = 1
QUICK_WARMUP = 1
QUICK_REPEATS = 1
# The forward-cost curve: timed calls per size (after warm-up calls); --quick uses fewer.
FORWARD_COST_REPEATS = 15
FORWARD_COST_WARMUP = 3
QUICK_FORWARD_COST_REPEATS = 3
QUICK_FORWARD_COST_WARMUP = 1

# arvis fid: held-out real images in the reference; below MIN_MEANINGFUL_IMAGES generated images an FID is
# mostly sample-size bias (it is then printed beside the real-vs-real floor at the same N, with a warning).
FID_IMAGES = 1000  # images `arvis fid --model` samples without --num-images or --per-class
DEFAULT_REFERENCE_COUNT = 5000
MIN_MEANINGFUL_IMAGES = 100
FEATURE_BATCH_SIZE = 64
# How images reach the feature network's input side: clean-fid's "clean" PIL bicubic, or torch bilinear
# (pytorch-fid's resize, the usual stand-in for ADM's TensorFlow evaluator).
RESIZE_MODES = ("clean", "bilinear")
