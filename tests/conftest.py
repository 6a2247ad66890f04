"""Shared fixtures: tiny models built from a fixed generator, single-threaded torch; the two tiers.

Tests run single-threaded by default: the models here are tiny, and with two OpenMP threads on a
busy two-core machine a small matmul can stall for milliseconds. Set ARVIS_TEST_THREADS to change it.
Under pytest-xdist (``make test``, ``make check``: ``-n auto``) each worker is one such process, and the
processes the tests start get one OpenMP thread too, so that N workers use N cores, not N x cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(int(os.environ.get("ARVIS_TEST_THREADS", "1")))
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("ARVIS_TEST_THREADS", "1"))

TESTS = Path(__file__).resolve().parent


def tiny_llamagen(model_type: str = "c2i", grid: int = 4, vocab: int = 32, seed: int = 0, **overrides):
    from arvis.models.llamagen import LlamaGenTransformer

    cfg = dict(dim=32, n_layer=2, n_head=4, vocab_size=vocab, block_size=grid * grid, multiple_of=16,
               num_classes=5, model_type=model_type)
    if model_type == "t2i":
        cfg.update(caption_dim=12, cls_token_num=6)
    cfg.update(overrides)
    model = LlamaGenTransformer(**cfg)
    g = torch.Generator().manual_seed(seed)
    model.init_weights(g)
    with torch.no_grad():  # the official init zeroes the head; give the tiny model real logits
        model.output.weight.normal_(0.0, 0.5, generator=g)
    return model.eval()


@pytest.fixture
def c2i_model():
    return tiny_llamagen("c2i")


@pytest.fixture
def t2i_model():
    return tiny_llamagen("t2i")


@pytest.fixture(autouse=True)
def _keep_test_threads():
    """Commands run in-process set torch's thread count (their default: every core); restore it after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# The fast tier (`make check`, a few minutes) leaves these out: the statistical proofs, the documentation's
# commands, trainer runs, figure scripts, servers and browsers, the shipped models. They run in the full suite
# (`make test`, CI), as do the tests marked `full` one by one. Paths are relative to tests/; a folder ends in "/".
FULL_TIER = {
    "training/", "demo/",
    "docs/test_docs.py",
    "acceptance/test_continuous_acceptance.py", "acceptance/test_relaxed.py",
    "methods/test_lossless.py",
    "pipelines/test_shipped_models.py",
    "pipelines/emu3/test_emu3_lossless.py", "pipelines/janus/test_janus_lossless.py",
    "pipelines/video/test_video.py", "pipelines/video/test_video_lossless.py",
    "eval/test_eval_sampling.py", "eval/test_eval_comparable_fid.py", "eval/test_hostile_jobs.py",
    "eval/test_mar_figures.py", "eval/test_emu3_figures.py", "eval/test_video_metrics.py",
}


# Single tests of fast-tier modules that take tens of seconds (whole CLI runs, statistical samplers): full tier.
FULL_TIER_TESTS = {
    "test_bench_command_writes_json_markdown_and_plots", "test_bench_compares_methods_against_ar",
    "test_next_scale_sampler_draws_the_exact_distribution_and_a_wrong_ramp_fails",
    "test_generate_writes_pngs_with_their_parameters_and_per_image_stats",
    "test_each_run_gets_its_own_folder_and_a_used_folder_needs_overwrite", "test_cli_generate_and_bench_on_a_tiny_folder",
    "test_exact_speculative_tokens_follow_the_target_and_a_planted_bug_fails",
    "test_model_defaults_decide_guidance_unless_a_flag_overrides", "test_records_name_models_without_absolute_paths",
    "test_cli_generate_and_bench_on_an_emu3_folder", "test_cli_generate_and_bench_on_a_janus_folder",
    # statistical proofs (50,000 samples per case) of the 2025-26 methods
    "test_sjd_pac_matches_exact_distribution", "test_harness_catches_planted_sjd_pac_bugs",
    "test_rows_that_wait_for_the_row_above_are_lossless", "test_the_mask_check_has_teeth",
    "test_row_causal_mask_reads_only_committed_tokens_of_other_rows", "test_parallel_rows_are_lossy_and_the_harness_sees_it",
}


def in_full_tier(path: Path) -> bool:
    """Whether a test module or folder is in :data:`FULL_TIER` (by its path under tests/)."""
    try:
        relative = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return False
    return any(relative == entry or (relative + "/").startswith(entry) for entry in FULL_TIER)


def module_fixture_group(item: pytest.Item) -> str | None:
    """The test's module when the test uses a module- or class-scoped fixture defined in that module (a trained
    tiny model, a written folder, a server), else None. ``make test`` runs pytest-xdist with ``--dist loadgroup``:
    the tests of one group run on one worker, so such a fixture is built once, not once per worker; all other
    tests are spread one by one."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixtures of the test (no public accessor)
    for definitions in (info.name2fixturedefs.values() if info else ()):
        definition = definitions[-1]  # the one this test gets (the closest override)
        if definition.scope in ("module", "class") and definition.baseid.split("::", 1)[0] == module:
            return module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group markers added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        if in_full_tier(item.path) or getattr(item, "originalname", item.name) in FULL_TIER_TESTS:
            item.add_marker(pytest.mark.full)
        group = module_fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    # Rows of docs/reliability.md: see tests/reliability_rows.py.
    config.addinivalue_line("markers", "reliability(area, probe, outcome): the docs/reliability.md row this test proves")
    # pytest-xdist registers it too; declared here so that a run without xdist (plain `pytest`) accepts it.
    config.addinivalue_line("markers", "xdist_group(name): tests that run on one pytest-xdist worker")


def pytest_ignore_collect(collection_path, config):
    """The fast tier (``-m "… not full"``) does not even import the full tier's modules (gradio, trainers…)."""
    if "not full" in (config.getoption("markexpr") or "") and in_full_tier(collection_path):
        return True
    return None


# ----------------------------------------------------------------------------- fixtures shared by test modules
@pytest.fixture(scope="module")
def table():
    """The lossless harness's table model (tests/lossless_harness.py), seed 0."""
    from tests.lossless_harness import TableBackbone

    return TableBackbone(seed=0)


@pytest.fixture(scope="module")
def exact(table):
    """``exact(sampling)``: the table model's exact sequence distribution under ``sampling`` (cached)."""
    cache = {}

    def get(sampling):
        if sampling not in cache:
            cache[sampling] = table.sequence_probabilities(1, sampling)
        return cache[sampling]

    return get


RELAXED_VOCAB = 8  # the codebook size of the relaxed-acceptance tests


@pytest.fixture(scope="module")
def neighbours():
    """Codebook neighbourhoods (4 per code) of a random 8-entry codebook in 2-D."""
    from arvis.acceptance.neighbours import nearest_neighbours

    return nearest_neighbours(torch.randn(RELAXED_VOCAB, 2, generator=torch.Generator().manual_seed(0)), 4)
