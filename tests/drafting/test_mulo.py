"""Multi-scale drafting (MuLo-SD): the up-sampler, its trainer, the drafter, both method variants.

The statistical checks use the lossless harness (tests/lossless_harness.py) on a 3x3 grid with a
vocabulary of 2 (512 sequences): the low-resolution "model" is a 1x1 table model of the same vocabulary
and the up-sampler a randomly initialised 1x1 → 3x3 :class:`TokenUpsampler` with peaked outputs, so the
drafts really depend on the low-resolution sample.
"""

from __future__ import annotations

import pytest
import torch

from arvis.drafting.multiscale import MultiScaleDrafter
from arvis.engine.sampling import SamplingConfig
from arvis.methods import MissingResourceError, build_method, decode, is_lossless, validate_method
from arvis.models.protocol import Condition
from arvis.models.upsampler import TokenUpsampler
from tests.conftest import tiny_llamagen
from tests.lossless_harness import NUM_CLASSES, TableBackbone, check, empirical

N_SAMPLES = 50_000
GRID3 = (3, 3)
NO_CFG = SamplingConfig()
CFG = SamplingConfig(guidance_scale=3.0)


def peaked_upsampler(vocab: int, low_grid: int, scale: int, num_classes: int, seed: int = 0, gain: float = 4.0
                     ) -> TokenUpsampler:
    """A random up-sampler whose ``q`` is far from uniform and differs between positions and inputs."""
    torch.manual_seed(seed)  # nn.Module default initialisation (test only)
    up = TokenUpsampler(vocab_size=vocab, low_grid=low_grid, scale=scale, dim=8, low_blocks=1, high_blocks=1,
                        num_classes=num_classes, groups=2)
    with torch.no_grad():
        up.head.weight.mul_(gain)
        up.position_embedding.normal_(0.0, 1.0)
    return up.eval()


@pytest.fixture(scope="module")
def table3():
    return TableBackbone(seed=3, grid=GRID3, vocab=2, scale=1.5, class_scale=0.5)


@pytest.fixture(scope="module")
def drafter_parts():
    return {"lowres_model": TableBackbone(seed=4, grid=(1, 1), vocab=2),
            "upsampler": peaked_upsampler(2, 1, 3, NUM_CLASSES)}


def run3(table, sampling, method, n, seed, parts, **options):
    condition = Condition(class_labels=torch.full((n,), 1, dtype=torch.long))
    tokens, stats = decode(table, condition, sampling, method, torch.Generator().manual_seed(seed), **parts, **options)
    return tokens, stats


# --------------------------------------------------------------------------- up-sampler
def test_upsampler_shapes_distributions_and_errors():
    up = peaked_upsampler(16, 2, 2, 3)
    low = torch.randint(0, 16, (5, 2, 2))
    logits = up(low, torch.tensor([0, 1, 2, 0, 1]))
    assert logits.shape == (5, 16, 16)
    q = up.distributions(low.flatten(1), torch.tensor([0, 1, 2, 0, 1]), temperature=0.5)
    assert torch.allclose(q.sum(-1), torch.ones(5, 16)) and q.dtype == torch.float32
    # The output really depends on the input map and the class.
    assert not torch.allclose(up(low[:1], torch.tensor([0])), up(low[:1], torch.tensor([1])))
    with pytest.raises(ValueError, match="low_tokens"):
        up(torch.zeros(1, 3, 3, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError, match="codebook ids"):
        up(torch.full((1, 2, 2), 16), torch.tensor([0]))
    with pytest.raises(ValueError, match="class_labels"):
        up(low[:1])
    with pytest.raises(ValueError, match="temperature"):
        up.distributions(low[:1], torch.tensor([0]), temperature=0)
    with pytest.raises(ValueError, match="groups"):
        TokenUpsampler(dim=10, groups=4)


def test_drafter_checks_its_models_fit_the_target(drafter_parts):
    up = drafter_parts["upsampler"]
    with pytest.raises(ValueError, match="grid"):
        MultiScaleDrafter(TableBackbone(seed=1, grid=(2, 2), vocab=2), up)
    with pytest.raises(ValueError, match="vocabulary"):
        MultiScaleDrafter(TableBackbone(seed=1, grid=(1, 1), vocab=3), up)
    with pytest.raises(TypeError, match="upsampler"):
        MultiScaleDrafter(drafter_parts["lowres_model"], object())
    target = tiny_llamagen(grid=4, vocab=2)  # a 4x4 target cannot take 3x3 drafts
    with pytest.raises(ValueError, match="upsampler: drafts a 3x3 grid"):
        decode(target, Condition(class_labels=torch.tensor([0])), NO_CFG, "mulo-local", **drafter_parts)


def test_bad_options_and_missing_resources(drafter_parts):
    for bad in ({"window": 0}, {"radius": 0}, {"temperature": 0.0}, {"radius": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            build_method("mulo-local", resources=drafter_parts, **bad)
    with pytest.raises(MissingResourceError, match="lowres_model"):  # resources are required when the decode starts
        decode(TableBackbone(seed=3, grid=GRID3, vocab=2), Condition(class_labels=torch.tensor([0])), NO_CFG,
               "mulo-local")
    validate_method("mulo-local", {"window": 8})  # resources come from the pipeline later
    assert not is_lossless("mulo-local", {})


# --------------------------------------------------------------------------- the lossless variant
# Its statistical test and planted-bug control live with the other lossless cases (tests/methods/test_lossless.py,
# test_multiscale_drafting_matches_exact_distribution, test_harness_catches_misreported_upsampler_q).
def test_lossless_variant_refuses_options_it_does_not_use(drafter_parts):
    with pytest.raises(ValueError, match="init"):
        build_method("mulo", resources=drafter_parts, init="repeat_vertical")
    with pytest.raises(ValueError, match="window_shape"):
        build_method("mulo", resources=drafter_parts, window_shape="staircase")
    assert is_lossless("mulo", {}) and not is_lossless("mulo", {"acceptance": "lantern"})


# --------------------------------------------------------------------------- the published variant
def test_local_variant_commits_everything_and_counts_the_drafter(table3, drafter_parts):
    tokens, stats = run3(table3, CFG, "mulo-local", 64, 0, drafter_parts, window=4, radius=1)
    assert tokens.min() >= 0 and tokens.max() < 2
    for s in stats.samples:
        # one low-resolution forward (a 1x1 grid: its prefill) plus the up-sampler
        assert s.draft_forwards == 2 and s.tokens == 9
        assert sorted(set(s.commit_forward)) == list(range(s.target_forwards))  # every forward commits
    extra = stats.samples[0].extra
    assert 0 < extra["alpha_upsampler_drafts"] < 1 and len(extra["rejections"]) == 9


def test_local_variant_with_radius_covering_the_grid_is_lossless(table3, drafter_parts):
    tokens, _ = run3(table3, CFG, "mulo-local", N_SAMPLES, 21, drafter_parts, window=3, radius=3)
    verdict = check(table3.sequence_probabilities(1, CFG), empirical(tokens, 2), N_SAMPLES)
    assert verdict.passed, str(verdict)


def test_local_variant_with_radius_one_is_lossy_and_the_harness_sees_it(table3, drafter_parts):
    tokens, stats = run3(table3, NO_CFG, "mulo-local", N_SAMPLES, 22, drafter_parts, window=8, radius=1)
    assert max(s.extra["committed_ahead_of_frontier"] for s in stats.samples) > 0  # local commits happened
    verdict = check(table3.sequence_probabilities(1, NO_CFG), empirical(tokens, 2), N_SAMPLES)
    assert not verdict.passed, f"the lossy local variant passed the lossless test: {verdict}"


# --------------------------------------------------------------------------- pipeline
def mulo_pipeline():
    from arvis.pipelines import LlamaGenPipeline
    from tests.pipelines.test_llamagen import tiny_vq

    pipe = LlamaGenPipeline(tiny_llamagen(grid=4, vocab=32, class_names=None), tiny_vq(),
                            lowres_transformer=tiny_llamagen(grid=2, vocab=32, seed=1, class_names=None),
                            upsampler=peaked_upsampler(32, 2, 2, 5))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_pipeline_passes_its_multiscale_components_and_round_trips(tmp_path):
    from arvis.pipelines import LlamaGenPipeline

    pipe = mulo_pipeline()
    gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
    out = pipe(class_labels=[0, 2], generator=gens, output_type="latent", method="mulo-local", window=4, radius=2)
    assert out.tokens.shape == (2, 4, 4)
    assert all(s.draft_forwards == 4 + 1 for s in out.stats.samples)  # 2x2 low-res AR + the up-sampler
    pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    for name in ("lowres_transformer", "upsampler"):
        a, b = getattr(pipe, name).state_dict(), getattr(loaded, name).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    again = loaded(class_labels=[0, 2], generator=[torch.Generator().manual_seed(s) for s in (3, 4)],
                   output_type="latent", method="mulo-local", window=4, radius=2)
    assert torch.equal(out.tokens, again.tokens)
    # The low-resolution model decoded by MC-SJD (at most as many of its forwards as plain AR).
    fast = loaded(class_labels=[0, 2], generator=[torch.Generator().manual_seed(s) for s in (3, 4)],
                  output_type="latent", method="mulo", window=4, lowres_window=3)
    assert fast.tokens.shape == (2, 4, 4)
    assert all(s.draft_forwards <= 4 + 1 and s.extra["lowres_window"] == 3 for s in fast.stats.samples)


def test_pipeline_without_multiscale_components_says_what_is_missing():
    from tests.pipelines.test_llamagen import dummy_pipeline

    with pytest.raises(ValueError, match="needs a low-resolution drafter"):
        dummy_pipeline()(class_labels=[0], method="mulo-local")


# --------------------------------------------------------------------------- eval/mulo.py
def test_eval_script_alpha_maps_and_report_on_a_tiny_pipeline(tmp_path):
    import json

    from tests.eval.eval_modules import eval_module

    script = eval_module("mulo")

    folder = tmp_path / "pipe"
    mulo_pipeline().save_pretrained(folder)
    (folder / "sampling_defaults.json").write_text(json.dumps({"guidance_scale": 2.0, "top_k": 0}))
    out = tmp_path / "figures"
    alpha = out / "mulo" / "alpha.json"
    assert script.main(["alpha", "--pipeline", str(folder), "--lowres", str(folder / "lowres_transformer"),
                        "--upsampler", str(folder / "upsampler"), "--num", "6", "--steered", "4",
                        "--cache", str(tmp_path / "cache"), "--json", str(alpha)]) == 0
    record = json.loads(alpha.read_text())
    drafts = record["drafts"]
    assert set(drafts) == {"oracle", "independent", "uniform", "class_frequencies", "steered (mulo:window=32 decodes)"}
    for d in drafts.values():
        assert 0 < d["alpha"] <= 1 and len(d["alpha_by_row"]) == 4
    assert (tmp_path / "cache" / "target-ar-6-0.pt").is_file()
    # Without a low-resolution model: the oracle and the yardsticks only, and a Markdown table from the record.
    alone, table = out / "mulo" / "alpha-upsampler.json", out / "mulo" / "alpha-upsampler.md"
    trained = {"params": 1, "steps": 3, "heldout_crops": 4, "config": {"steps": 9},
               "heldout": {"nll": 6.25, "top1": 0.5, "top10": 0.75},
               "baselines": {"class_frequencies": {"nll": 5.5, "top1": 0.25}, "nearest_requantised_top1": 0.125,
                             "bicubic_requantised_top1": 0.375}}
    (folder / "upsampler" / "metrics.json").write_text(json.dumps(trained))
    assert script.main(["alpha", "--pipeline", str(folder), "--no-lowres", "--upsampler", str(folder / "upsampler"),
                        "--num", "6", "--steered", "0", "--cache", str(tmp_path / "cache"), "--json", str(alone),
                        "--markdown", str(table)]) == 0
    record_alone = json.loads(alone.read_text())
    assert set(record_alone["drafts"]) == {"oracle", "uniform", "class_frequencies"}
    assert record_alone["drafts"]["oracle"] == drafts["oracle"]  # same cached target samples, same q
    oracle = record_alone["drafts"]["oracle"]
    assert f"| oracle | {oracle['alpha']:.4f} | {oracle['nll']:.3f} |" in table.read_text()
    assert record_alone["upsampler_training"]["steps"] == 3
    assert "after 3 training steps" in table.read_text() and "| 6.250 | 50.0% | 75.0% |" in table.read_text()
    again = out / "mulo" / "again.md"
    assert script.main(["alpha-table", "--json", str(alone), "--markdown", str(again)]) == 0
    assert again.read_text() == table.read_text()
    maps = out / "mulo" / "maps.json"
    assert script.main(["maps", "--pipeline", str(folder), "--specs", "mc-sjd:window=4", "mulo-local:window=4,radius=1",
                        "--num", "3", "--json", str(maps), "--plots", str(out / "mulo" / "maps-plots")]) == 0
    m = json.loads(maps.read_text())
    assert set(m["specs"]) == {"mc-sjd:window=4", "mulo-local:window=4,radius=1"}
    assert (out / "mulo" / "maps-plots" / "rejections.png").is_file()
    figures = eval_module("figures")
    assert figures.main(["--suite", "mulo", "--out", str(out), "--report-only"]) == 0
    report = (out / "mulo.md").read_text()
    assert "## α: what the up-sampler's drafts are worth" in report and "| oracle |" in report


def test_rejection_sites_of_a_raster_window_method():
    from tests.eval.eval_modules import eval_module

    script = eval_module("mulo")
    # window 2 (3 tokens at most per forward): the prefill commits 0; forward 1 commits 1..3 (all accepted
    # plus the bonus), forward 2 commits 4 (a rejection), forward 3 commits 5, 6 (rejection at 6), forward 4
    # commits 7 (the last token, not a rejection).
    order = [0, 1, 1, 1, 2, 3, 3, 4]
    assert script.rejection_sites(order, 2) == [4, 6]


def test_assemble_links_the_multiscale_components_into_a_pipeline(tmp_path):
    from arvis.pipelines import LlamaGenPipeline
    from arvis.training import assemble
    from tests.pipelines.test_llamagen import dummy_pipeline

    parts = mulo_pipeline()
    dummy_pipeline().save_pretrained(tmp_path / "pipe")
    parts.lowres_transformer.save_pretrained(tmp_path / "lowres")
    parts.upsampler.save_pretrained(tmp_path / "up")
    with pytest.raises(ValueError, match="expected a TokenUpsampler folder, found LlamaGenTransformer"):
        assemble.main(["--out", str(tmp_path / "pipe"), "--link", f"upsampler={tmp_path / 'lowres'}"])
    assemble.main(["--out", str(tmp_path / "pipe"), "--link", f"lowres_transformer={tmp_path / 'lowres'}",
                   "--link", f"upsampler={tmp_path / 'up'}"])
    assert (tmp_path / "pipe" / "upsampler").is_symlink()
    loaded = LlamaGenPipeline.from_pretrained(tmp_path / "pipe")
    a, b = parts.upsampler.state_dict(), loaded.upsampler.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
