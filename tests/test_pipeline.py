"""LlamaGenPipeline: diffusers conventions over tiny components (save/load, batch == single, errors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arvis.models.llamagen import LlamaGenTransformer
from arvis.pipelines import LlamaGenPipeline, LlamaGenPipelineOutput
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from tests.conftest import tiny_llamagen


def tiny_vq(codebook: int = 32, seed: int = 0) -> LlamaGenVQModel:
    vq = LlamaGenVQModel(codebook_size=codebook, codebook_embed_dim=4, encoder_ch_mult=(1, 2),
                         decoder_ch_mult=(1, 2), z_channels=8, base_channels=8, norm_num_groups=4)
    return vq.init_weights(torch.Generator().manual_seed(seed)).eval()


def dummy_pipeline(model_type: str = "c2i") -> LlamaGenPipeline:
    pipe = LlamaGenPipeline(tiny_llamagen(model_type, class_names=None), tiny_vq())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_call_returns_images_tokens_and_stats():
    pipe = dummy_pipeline()
    out = pipe(class_labels=[0, 3], guidance_scale=2.0, generator=gens(0, 1))
    assert isinstance(out, LlamaGenPipelineOutput)
    assert len(out.images) == 2 and out.images[0].size == (8, 8)
    assert out.tokens.shape == (2, 4, 4) and out.tokens.min() >= 0 and out.tokens.max() < 32
    s = out.stats.summary()
    assert s["target_forwards"] == 16 and s["step_compression"] == 1.0 and s["tokens"] == 16


def test_output_types_and_return_tuple():
    pipe = dummy_pipeline()
    kw = dict(class_labels=[1], generator=gens(5))
    pt = pipe(**kw, output_type="pt").images
    kw["generator"] = gens(5)
    arr = pipe(**kw, output_type="np").images
    kw["generator"] = gens(5)
    images, tokens, stats = pipe(**kw, output_type="latent", return_dict=False)
    assert pt.shape == (1, 3, 8, 8) and 0 <= pt.min() and pt.max() <= 1
    np.testing.assert_allclose(arr, pt.permute(0, 2, 3, 1).numpy())
    assert torch.equal(images, tokens)


def test_same_seed_same_images_and_different_seed_differs():
    pipe = dummy_pipeline()
    a = pipe(class_labels=[2, 2], generator=gens(7, 8), output_type="np").images
    b = pipe(class_labels=[2, 2], generator=gens(7, 8), output_type="np").images
    c = pipe(class_labels=[2, 2], generator=gens(9, 10), output_type="np").images
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_batch_with_per_sample_generators_equals_one_at_a_time(guidance):
    pipe = dummy_pipeline()
    labels, seeds = [0, 1, 4, 1], [11, 12, 13, 14]
    batch = pipe(class_labels=labels, guidance_scale=guidance, generator=gens(*seeds), output_type="latent").images
    for i, (label, seed) in enumerate(zip(labels, seeds, strict=True)):
        single = pipe(class_labels=[label], guidance_scale=guidance, generator=gens(seed), output_type="latent").images
        assert torch.equal(batch[i], single[0])


def test_num_images_per_prompt_and_text_conditional_embeddings():
    pipe = dummy_pipeline("t2i")
    emb = torch.randn(2, 6, 12, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, :3] = False
    out = pipe(prompt_embeds=emb, prompt_embeds_mask=mask, num_images_per_prompt=2, generator=gens(1, 2, 3, 4),
               output_type="latent")
    assert out.tokens.shape == (4, 4, 4)
    # The padded part of the embedding is ignored: changing it changes nothing.
    emb2 = emb.clone()
    emb2[0, :3] = 100.0
    out2 = pipe(prompt_embeds=emb2, prompt_embeds_mask=mask, num_images_per_prompt=2, generator=gens(1, 2, 3, 4),
                output_type="latent")
    assert torch.equal(out.tokens, out2.tokens)


def test_save_load_round_trip_identical(tmp_path):
    pipe = dummy_pipeline()
    before = pipe(class_labels=[0, 2], generator=gens(3, 4), output_type="np").images
    pipe.save_pretrained(tmp_path)
    assert (tmp_path / "transformer" / "diffusion_pytorch_model.safetensors").is_file()
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    for name in ("transformer", "vqvae"):
        a, b = getattr(pipe, name).state_dict(), getattr(loaded, name).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    after = loaded(class_labels=[0, 2], generator=gens(3, 4), output_type="np").images
    np.testing.assert_array_equal(before, after)


def test_callback_sees_every_commit():
    pipe = dummy_pipeline()
    seen = []
    pipe(class_labels=[0], generator=gens(0), output_type="latent",
         callback_on_step_end=lambda p, step, committed, kw: seen.append((step, int(committed[0]))))
    assert seen == [(i, i + 1) for i in range(16)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(class_labels=[5]), r"class_labels: 5 is not a class id of this model \(valid: 0..4\)"),
    (dict(class_labels=[-1]), r"class_labels: -1"),
    (dict(class_labels=["nope"]), "unknown class name"),
    (dict(class_labels=[0], guidance_scale=-1.0), r"guidance_scale must be >= 0"),
    (dict(class_labels=[0], top_k=-1), r"top_k must be an integer >= 0"),
    (dict(class_labels=[0], top_p=0.0), r"top_p must be in \(0, 1\]"),
    (dict(class_labels=[0], top_p=1.5), r"top_p must be in \(0, 1\]"),
    (dict(class_labels=[0], temperature=-0.1), "temperature must be >= 0"),
    (dict(class_labels=[0], output_type="jpeg"), "output_type"),
    (dict(class_labels=[0], num_images_per_prompt=0), "num_images_per_prompt"),
    (dict(class_labels=[0, 1], generator=[torch.Generator()]), "generator"),
    (dict(class_labels=[0], method="magic"), "unknown method 'magic'"),
    (dict(class_labels=[0], window=4), r"method 'ar' has no option"),
    (dict(prompt="a cat"), "class-conditional"),
])
def test_bad_input_raises_value_error_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dummy_pipeline()(**kwargs)


def test_mismatched_tokenizer_is_refused():
    with pytest.raises(ValueError, match="vqvae: its codebook has 64 entries but the transformer predicts 32"):
        LlamaGenPipeline(tiny_llamagen("c2i"), tiny_vq(codebook=64))


def test_class_names_from_config():
    model = tiny_llamagen("c2i", class_names=["cat", "dog", "owl", "fox", "emu"])
    pipe = LlamaGenPipeline(model, tiny_vq())
    pipe.set_progress_bar_config(disable=True)
    assert pipe.class_ids(["owl", 0]) == [2, 0]
    with pytest.raises(ValueError, match="class_names has 2 names"):
        LlamaGenTransformer(dim=32, n_layer=1, n_head=4, num_classes=5, class_names=["a", "b"])
