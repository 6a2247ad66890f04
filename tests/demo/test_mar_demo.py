"""The demo's core (no server) runs MAR folders side by side: AR against ``cspd`` (masked MAR) and against
``cspd-exact`` (the causal variant), with live previews of the tokens committed so far, statistics and plots."""

from __future__ import annotations

import json

import pytest
import torch

from arvis.demo.core import (
    DemoInputError,
    DemoLimits,
    DemoModel,
    ModelSet,
    RunResult,
    comparison,
    model_info,
    side_by_side,
    stats_markdown,
    stats_plots,
    validate_request,
)
from arvis.models.mar import MARTransformer
from arvis.pipelines import MARPipeline
from arvis.tokenizers.mar_vae import build_kl_vae


def _pair(causal: bool, width: int, seed: int):
    t = MARTransformer(img_size=64, vae_stride=16, encoder_embed_dim=width, encoder_depth=1, encoder_num_heads=2,
                       decoder_embed_dim=width, decoder_depth=1, decoder_num_heads=2, vae_embed_dim=4, buffer_size=4,
                       num_classes=3, class_names=["a", "b", "c"], causal=causal)
    t.init_weights(torch.Generator().manual_seed(seed))
    head = t.default_head(width=16, depth=1, sampling_steps=4)
    head.init_weights(torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():  # the official init leaves the head's output at zero: give it real outputs
        for p in head.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 2)))
    return t.eval(), head.eval()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Tiny saved MAR folders (4x4 tokens, 64 px) with a draft: masked and causal."""
    root = tmp_path_factory.mktemp("mar-demo")
    vae = build_kl_vae(block_out_channels=(8, 8, 8, 8, 8), latent_channels=4, resolution=64, norm_num_groups=4).eval()
    out = {}
    for name, causal, defaults in (("mar", False, {"num_iter": 4, "guidance_scale": 2.0}),
                                   ("mar-causal", True, {"guidance_scale": 2.0, "cfg_schedule": "constant"})):
        pipe = MARPipeline(*_pair(causal, 32, 0), vae, *_pair(causal, 16, 5))
        pipe.save_pretrained(root / name, safe_serialization=True)
        (root / name / "sampling_defaults.json").write_text(json.dumps(defaults))
        out[name] = root / name
    return out


@pytest.mark.parametrize("name, method, options", [("mar", "cspd", {"verify_every": 2}),
                                                   ("mar-causal", "cspd-exact", {"window": 3, "final_std": 0.05})])
def test_demo_runs_a_mar_folder_side_by_side(folders, name, method, options):
    models = ModelSet({name: DemoModel(loader=lambda: MARPipeline.from_pretrained(str(folders[name])), untrained=True)})
    info = model_info(models.pipeline(name))
    assert info["class_conditional"] and info["grid"] == [4, 4] and info["num_classes"] == 3
    request = validate_request(models, DemoLimits(), model=name, class_label="b", prompt=None, method=method, seed=0,
                               num_images=2, guidance_scale=None, top_k=None, top_p=None, temperature=None,
                               live_preview=True, options=options)
    assert request.guidance_scale == 2.0  # the folder's default
    items = list(side_by_side(models, request, DemoLimits(preview_interval_s=0.001)))
    previews = [p for p in items if not isinstance(p, RunResult) and p.image is not None]
    ar, other = [r for r in items if isinstance(r, RunResult)]
    assert previews and previews[0].committed < 2 * 16  # a partial grid was shown while tokens committed
    assert len(ar.images) == len(other.images) == 2 and ar.images[0].size == (64, 64)
    record = comparison(request, ar, other, untrained=True)
    assert record["ar"]["tokens_per_image"] == 16 and record["method"]["method"] == method
    assert record["method"]["lossless"] is (method == "cspd-exact")
    assert ar.stats.samples[0].target_forwards == (4 if method == "cspd" else 16)  # num_iter 4; one per token
    if method == "cspd-exact":  # the AR side is the sampler cspd-exact is exact for: the same last-step std
        from arvis.utils.random import image_generators

        pipe = models.pipeline(name)
        assert pipe.baseline_options(method, options) == {"final_std": 0.05} == ar.options  # options of its "ar"

        def plain(final_std: float) -> torch.Tensor:
            return pipe(class_labels=["b", "b"], final_std=final_std, output_type="latent",
                        generator=image_generators(0, range(2))).tokens

        assert torch.equal(ar.tokens, plain(0.05)) and not torch.equal(ar.tokens, plain(0.0))
    # What the page says matches the method: cspd-exact is exact in distribution (not token for token, and Gumbel
    # coupling has nothing to do with it); cspd is lossy.
    table = stats_markdown(record)
    assert record["identity_expected"] is False and "Gumbel" not in table and "(lossless" not in table
    if method == "cspd-exact":
        assert "(exact in distribution)" in table and "distributional claim" in table
        assert "tokens identical to AR | | no (not expected)" in table or record["tokens_identical_to_ar"]
    else:
        assert "(**lossy**)" in table
    histogram, order = stats_plots(ar, other, info["grid"])
    assert histogram.size[0] > 0 and order.size[0] > 0


def test_demo_refuses_a_method_the_mar_folder_cannot_run(folders):
    models = ModelSet({"mar": DemoModel(loader=lambda: MARPipeline.from_pretrained(str(folders["mar"]))),
                       "mar-causal": DemoModel(loader=lambda: MARPipeline.from_pretrained(str(folders["mar-causal"])))})
    kw = dict(class_label=0, prompt=None, seed=0, num_images=1, guidance_scale=None, top_k=None, top_p=None,
              temperature=None, live_preview=False, options={})
    with pytest.raises(DemoInputError, match="cspd-exact"):
        validate_request(models, DemoLimits(), model="mar", method="cspd-exact", **kw)
    with pytest.raises(DemoInputError, match="cspd"):
        validate_request(models, DemoLimits(), model="mar-causal", method="cspd", **kw)
    with pytest.raises(DemoInputError, match="sjd"):
        validate_request(models, DemoLimits(), model="mar", method="sjd", **kw)
