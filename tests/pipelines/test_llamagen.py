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


# ----------------------------------------------------------------------------- loading by name, diffusers' loader
def test_shipped_models_resolve_by_name_from_anywhere(tmp_path, monkeypatch):
    import arvis.weights
    from arvis.hub import SHIPPED_PIPELINES, WEIGHTS_DIR

    monkeypatch.chdir(tmp_path)  # far from the repository root
    folder = arvis.weights.path("c2i")
    assert folder == WEIGHTS_DIR / SHIPPED_PIPELINES["c2i"] and (folder / "model_index.json").is_file()
    assert "c2i" in arvis.weights.names()
    with pytest.raises(ValueError, match="not a shipped model"):
        arvis.weights.path("nope")
    pipe = LlamaGenPipeline.from_pretrained("c2i")
    assert pipe.transformer.config.num_classes == 22 and pipe.draft_transformer is not None
    assert pipe.sampling_defaults["guidance_scale"] == 3.0  # the folder's sampling_defaults.json
    with pytest.raises(ValueError, match="neither a shipped model"):
        LlamaGenPipeline.from_pretrained("no-such-model")
    # The shipped folders open with diffusers' generic loader too (their pipeline.py imports arvis's class).
    from diffusers import DiffusionPipeline

    generic = DiffusionPipeline.from_pretrained(folder, custom_pipeline="pipeline", trust_remote_code=True)
    assert type(generic) is LlamaGenPipeline and generic.sampling_defaults["guidance_scale"] == 3.0


def test_a_folder_wins_over_an_alias_of_the_same_name(tmp_path, monkeypatch):
    pipe = dummy_pipeline()
    pipe.save_pretrained(tmp_path / "c2i")
    monkeypatch.chdir(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained("c2i")
    assert loaded.transformer.config.vocab_size == 32  # the local folder, not the shipped model


def test_diffusers_generic_loader_takes_the_folder_through_its_custom_pipeline_mechanism(tmp_path):
    from diffusers import DiffusionPipeline

    pipe = dummy_pipeline()
    pipe.sampling_defaults = {"guidance_scale": 2.0}
    pipe.save_pretrained(tmp_path)
    assert (tmp_path / "pipeline.py").is_file() and (tmp_path / "sampling_defaults.json").is_file()
    # diffusers refuses to run the folder's pipeline.py unless asked to (its remote-code rule) ...
    with pytest.raises(ValueError, match="trust_remote_code"):
        DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline="pipeline")
    # ... and with consent returns arvis's own class (pipeline.py only imports it), defaults included.
    loaded = DiffusionPipeline.from_pretrained(tmp_path, custom_pipeline="pipeline", trust_remote_code=True)
    assert type(loaded) is LlamaGenPipeline
    assert loaded.sampling_defaults == {"guidance_scale": 2.0}
    loaded.set_progress_bar_config(disable=True)
    a = loaded(class_labels=[1], generator=gens(0), output_type="latent").tokens
    b = pipe(class_labels=[1], generator=gens(0), output_type="latent").tokens
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------- sampling defaults
def test_sampling_settings_come_from_the_model_unless_the_caller_overrides(tmp_path):
    pipe = dummy_pipeline()
    assert pipe.sampling_config().guidance_scale == 1.0  # no defaults: SamplingConfig's
    pipe.sampling_defaults = {"guidance_scale": 2.5, "top_k": 5}
    pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    assert loaded.sampling_config().guidance_scale == 2.5 and loaded.sampling_config(top_k=0).top_k == 0
    implicit = loaded(class_labels=[2], generator=gens(4), output_type="latent").tokens
    explicit = loaded(class_labels=[2], generator=gens(4), output_type="latent", guidance_scale=2.5, top_k=5).tokens
    other = loaded(class_labels=[2], generator=gens(4), output_type="latent", guidance_scale=1.0, top_k=0).tokens
    assert torch.equal(implicit, explicit) and not torch.equal(implicit, other)
    with pytest.raises(ValueError, match="unknown setting"):
        pipe.sampling_defaults = {"guidance": 3.0}


# ----------------------------------------------------------------------------- labels
def test_tensor_class_labels_and_dit_style_label_lookup():
    model = tiny_llamagen("c2i", class_names=["cat", "dog", "owl", "fox", "emu"])
    pipe = LlamaGenPipeline(model, tiny_vq())
    pipe.set_progress_bar_config(disable=True)
    assert pipe.id2label == {0: "cat", 1: "dog", 2: "owl", 3: "fox", 4: "emu"}
    assert pipe.labels == {"cat": 0, "dog": 1, "emu": 4, "fox": 3, "owl": 2}
    assert pipe.get_label_ids(["owl", "cat"]) == [2, 0] and pipe.get_label_ids("fox") == [3]
    with pytest.raises(ValueError, match="unknown class name 'lion'"):
        pipe.get_label_ids(["lion"])
    by_tensor = pipe(class_labels=torch.tensor([2, 0]), generator=gens(1, 2), output_type="latent").tokens
    by_list = pipe(class_labels=[2, 0], generator=gens(1, 2), output_type="latent").tokens
    assert torch.equal(by_tensor, by_list)
    assert torch.equal(pipe(class_labels=torch.tensor(2), generator=gens(1), output_type="latent").tokens,
                       by_list[:1])
    for bad, match in ((torch.tensor([0.5]), "integer dtype"), (torch.zeros(1, 1, dtype=torch.long), "0-d or 1-d"),
                       (torch.tensor([7]), "not a class id")):
        with pytest.raises(ValueError, match=match):
            pipe(class_labels=bad)


# ----------------------------------------------------------------------------- callbacks (diffusers' contract)
def test_callback_gets_only_the_named_tensors_as_copies():
    pipe = dummy_pipeline()
    seen = []

    def callback(p, step, committed, kwargs):
        seen.append(sorted(kwargs))
        kwargs["tokens"].fill_(0)  # a copy: the decode is unaffected
        return None

    a = pipe(class_labels=[0], generator=gens(0), output_type="latent", callback_on_step_end=callback,
             callback_on_step_end_tensor_inputs=["tokens"]).tokens
    b = pipe(class_labels=[0], generator=gens(0), output_type="latent").tokens
    assert seen and all(s == ["tokens"] for s in seen)
    with pytest.raises(ValueError, match=r"callback_on_step_end_tensor_inputs: \['latents'\]"):
        pipe(class_labels=[0], callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["latents"])
    assert torch.equal(a, b) and (a != 0).any()


def test_callback_return_value_is_honoured():
    pipe = dummy_pipeline()

    def unchanged(p, step, committed, kwargs):
        return {"tokens": kwargs["tokens"]}

    pipe(class_labels=[0], generator=gens(0), output_type="latent", callback_on_step_end=unchanged)

    def edits(p, step, committed, kwargs):
        tokens = kwargs["tokens"].clone()
        tokens[0, 0] = (tokens[0, 0] + 1) % 32
        return {"tokens": tokens}

    with pytest.raises(ValueError, match="returned a changed 'tokens'"):
        pipe(class_labels=[0], generator=gens(0), output_type="latent", callback_on_step_end=edits)

    def stop_after_five(p, step, committed, kwargs):
        if int(committed.min()) >= 5:
            p._interrupt = True
        return {}

    out = pipe(class_labels=[0, 1], generator=gens(0, 1), output_type="np", callback_on_step_end=stop_after_five)
    flat = out.tokens.view(2, -1)
    assert pipe.interrupt and (flat[:, :5] >= 0).all() and (flat == -1).any()
    assert out.images.shape == (2, 8, 8, 3)  # uncommitted cells drawn grey
    full = pipe(class_labels=[0, 1], generator=gens(0, 1), output_type="latent").tokens.view(2, -1)
    assert torch.equal(flat[:, :5], full[:, :5]) and not pipe.interrupt


def test_pipeline_callback_objects_declare_their_tensor_inputs():
    from diffusers.callbacks import PipelineCallback

    class Count(PipelineCallback):
        tensor_inputs = ["known"]

        def callback_fn(self, pipeline, step_index, timestep, callback_kwargs):
            self.calls = getattr(self, "calls", 0) + 1
            assert set(callback_kwargs) == {"known"}
            return callback_kwargs

    count = Count()
    pipe = dummy_pipeline()
    pipe(class_labels=[0], generator=gens(0), output_type="latent", callback_on_step_end=count)
    assert count.calls == 16


# ----------------------------------------------------------------------------- a T5 text encoder (official t2i)
def tiny_t5(dim: int = 12):
    """A tiny random T5 encoder and a word-level fast tokenizer, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    words = ["<pad>", "</s>", "<unk>", "a", "red", "circle", "on", "the", "left", "blue", "square", "over", "grass"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)  # transformers initialises from the global generator; tests only
    encoder = T5EncoderModel(T5Config(vocab_size=len(words), d_model=dim, d_kv=4, d_ff=16, num_layers=1, num_heads=2,
                                      decoder_start_token_id=0)).eval()
    return encoder, tokenizer


def test_t5_text_encoder_component(tmp_path):
    encoder, tokenizer = tiny_t5()
    pipe = LlamaGenPipeline(tiny_llamagen("t2i"), tiny_vq(), text_encoder=encoder, tokenizer=tokenizer)
    pipe.set_progress_bar_config(disable=True)
    feats, mask = pipe.encode_prompt(["a red circle", "blue square over the grass"])
    # cls_token_num 6: 3 words + </s> = 4 real tokens left-padded; 6 (truncated) fill the row.
    assert feats.shape == (2, 6, 12) and mask.tolist() == [[False, False, True, True, True, True], [True] * 6]
    assert feats[0, :2].abs().sum() == 0
    # The features are T5's own for the real tokens, moved to the end of the row.
    ids = tokenizer(["a red circle"], return_tensors="pt")["input_ids"]
    direct = encoder(input_ids=ids).last_hidden_state[0]
    torch.testing.assert_close(feats[0, 2:], direct)
    out = pipe(prompt=["a red circle"], generator=gens(0), output_type="latent")
    pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    assert type(loaded.text_encoder).__name__ == "T5EncoderModel"
    again = loaded(prompt=["a red circle"], generator=gens(0), output_type="latent")
    assert torch.equal(out.tokens, again.tokens)
    with pytest.raises(ValueError, match="needs its tokenizer"):
        LlamaGenPipeline(tiny_llamagen("t2i"), tiny_vq(), text_encoder=encoder)
