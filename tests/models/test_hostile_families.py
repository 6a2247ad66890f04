"""Hostile inputs to the families added after LlamaGen (VAR, MAR, video, Emu3) and to the evaluators' configs.

The same probes as tests/models/test_hostile_loaders.py, on the newer families: every configuration is checked
against its declared bounds before anything is allocated (under a +1 GiB address-space cap), unknown
keys are refused, and the official-layout loaders refuse with an :class:`~arvis.errors.ArvisError`.
Each test declares the docs/reliability.md row it proves (tests/reliability_rows.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from arvis.errors import CheckpointError, ConfigError
from arvis.hub import shipped_names
from arvis.models.var import VARTransformer, export_var_checkpoint, load_var_checkpoint
from arvis.pipelines import VARPipeline
from arvis.tokenizers.var_vq import VARVQModel
from tests.models.test_hostile_loaders import edit_json, run_capped


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    return copy


# ----------------------------------------------------------------------------- VAR
@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    from tests.pipelines.test_var import tiny_pipeline

    path = tmp_path_factory.mktemp("var") / "var"
    tiny_pipeline().save_pretrained(path)
    return path


VAR_HOSTILE = [
    ("transformer", "depth", 10**6, "is not an integer in"),
    ("transformer", "patch_nums", list(range(1, 1001)), "is not a list of 1 to"),
    ("transformer", "mlp_ratio", 1e9, "is not a finite number in"),
    ("transformer", "embed_dim", 2**20, "is not an integer in"),
    ("transformer", "num_heads", 0, "is not an integer in"),
    ("transformer", "num_classes", 10**9, "is not an integer in"),
    ("draft_transformer", "depth", 10**6, "is not an integer in"),
    ("vqvae", "vocab_size", 2**40, "is not an integer in"),
    ("vqvae", "ch", 10**6, "is not an integer in"),
    ("vqvae", "v_patch_nums", list(range(1, 1001)), "is not a list of 1 to"),
]


@pytest.mark.reliability(area="loading: configurations",
                         probe="a VAR pipeline folder whose transformer (or draft) config.json says depth = 10⁶, "
                               "patch_nums = 1…1000, mlp_ratio = 10⁹, embed_dim = 2²⁰, num_heads = 0 or "
                               "num_classes = 10⁹, or whose VQ config says vocab_size = 2⁴⁰, ch = 10⁶ or "
                               "v_patch_nums = 1…1000",
                         outcome="ConfigError naming the component's config.json, the field and its bounds, before "
                                 "anything is allocated (+1 GiB cap); it used to start allocating and die with a "
                                 "raw RuntimeError")
@pytest.mark.parametrize("component, field, value, words", VAR_HOSTILE)
def test_var_configs_are_bounded_before_allocation(var_dir, tmp_path, component, field, value, words):
    folder = _copy(var_dir, tmp_path)
    edit_json(folder / component / "config.json", **{field: value})
    outcome, message = run_capped(lambda: VARPipeline.from_pretrained(str(folder)))
    assert outcome == "ConfigError", message
    assert f"{component}/config.json: {field} = " in message and words in message, message


@pytest.mark.reliability(area="loading: configurations",
                         probe="a VAR folder whose transformer config.json names more tokens than the bound in "
                               "total (patch_nums 1, 2, 4, … 128: 21,845 tokens), has an unknown key (depht), or a "
                               "head count the width does not divide (num_heads = 7 for width 32)",
                         outcome="ConfigError naming config.json and the field (the unknown key was ignored with a "
                                 "warning and the default built)")
@pytest.mark.parametrize("component, changes, words", [
    ("transformer", {"patch_nums": [1, 2, 4, 8, 16, 32, 64, 128]}, "tokens in all"),
    ("transformer", {"depht": 2}, "unknown config key 'depht' (did you mean 'depth'?)"),
    ("transformer", {"num_heads": 7}, "divisible by num_heads (7)"),
    ("vqvae", {"bogus": 1}, "unknown config key 'bogus'"),
])
def test_var_config_combinations_and_unknown_keys_are_refused(var_dir, tmp_path, component, changes, words):
    folder = _copy(var_dir, tmp_path)
    edit_json(folder / component / "config.json", **changes)
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        VARPipeline.from_pretrained(str(folder))
    assert f"{component}/config.json" in str(err.value)


@pytest.mark.reliability(area="loading: official checkpoints",
                         probe="official-layout VAR .pth files: a weight of integer dtype, a num_heads argument "
                               "that contradicts the weights (7, or 0), the state dict of another model, a preset "
                               "that does not match",
                         outcome="CheckpointError or ConfigError naming the file (it raised a plain ValueError, a raw "
                                 "RuntimeError for the int tensor, and ignored num_heads)")
def test_official_var_loader_refuses_with_arvis_errors(tmp_path):
    from tests.pipelines.test_var import tiny_var

    path = tmp_path / "var.pth"
    export_var_checkpoint(tiny_var(), path)
    sd = torch.load(path, weights_only=True)
    bad = tmp_path / "int.pth"
    torch.save({**sd, "head.bias": sd["head.bias"].long()}, bad)
    with pytest.raises(CheckpointError, match="int.pth: 'head.bias' has dtype torch.int64"):
        load_var_checkpoint(bad)
    for heads in (7, 0):
        with pytest.raises(ConfigError, match=f"var.pth.*: num_heads = {heads}"):
            load_var_checkpoint(path, num_heads=heads)
    with pytest.raises(ConfigError, match="var.pth: .*not a VAR-d20 checkpoint"):
        load_var_checkpoint(path, preset="d20")
    torch.save({"tok_embeddings.weight": torch.zeros(2, 2)}, tmp_path / "llamagen.pth")
    with pytest.raises(CheckpointError, match="llamagen.pth: not a VAR transformer state dict"):
        load_var_checkpoint(tmp_path / "llamagen.pth")
    assert load_var_checkpoint(path, num_heads=2).config.num_heads == 2  # the true head count is accepted


def test_constructor_arguments_all_have_bounds():
    """A field without a bound would be refused as unknown in config.json: the tables must be complete."""
    import inspect

    from arvis.models.upsampler import TokenUpsampler

    for cls in (VARTransformer, VARVQModel, TokenUpsampler):
        params = set(inspect.signature(cls.__init__).parameters) - {"self"}
        assert set(cls.config_bounds) == params, cls.__name__


# ----------------------------------------------------------------------------- MAR
@pytest.fixture(scope="module")
def mar_dir(tmp_path_factory) -> Path:
    from tests.pipelines.test_mar import tiny_pipeline

    path = tmp_path_factory.mktemp("mar") / "mar"
    tiny_pipeline().save_pretrained(path)
    return path


@pytest.mark.reliability(area="loading: configurations",
                         probe="a MAR pipeline folder whose VAE config.json (a diffusers AutoencoderKL) has an unknown "
                               "key, block_out_channels = [2²⁰], layers_per_block = 10⁶, a shift_factor arvis would "
                               "ignore, or whose transformer says img_size = 10⁶",
                         outcome="ConfigError naming vae/config.json (or transformer/config.json) and the field, "
                                 "before anything is allocated (+1 GiB cap); the unknown key was accepted")
@pytest.mark.parametrize("component, field, value, words", [
    ("vae", "bogus", 1, "unknown config key 'bogus'"),
    ("vae", "block_out_channels", [2**20], "block_out_channels = [1048576] is not a list of 1 to"),
    ("vae", "layers_per_block", 10**6, "layers_per_block = 1000000 is not an integer in"),
    ("vae", "shift_factor", 0.5, "shift_factor = 0.5 is not null"),
    ("transformer", "img_size", 10**6, "img_size = 1000000 is not an integer in"),
])
def test_mar_configs_are_bounded_before_allocation(mar_dir, tmp_path, component, field, value, words):
    from arvis.pipelines import MARPipeline

    folder = _copy(mar_dir, tmp_path)
    edit_json(folder / component / "config.json", **{field: value})
    outcome, message = run_capped(lambda: MARPipeline.from_pretrained(str(folder)))
    assert outcome == "ConfigError", message
    assert f"{component}/config.json" in message and words in message, message


@pytest.mark.reliability(area="loading: official checkpoints",
                         probe="an official-layout MAR .pth loaded with num_heads = 0, or img_size = 10⁶ / "
                               "vae_stride = 0 arguments; pickled args of the wrong type (img_size = \"big\"); a "
                               "KL-VAE .ckpt holding a list where a weight should be",
                         outcome="ConfigError naming the file and the argument or args field (the arguments were "
                                 "silently ignored when the file records its configuration); CheckpointError naming "
                                 "the VAE file and the key")
def test_official_mar_loaders_check_their_arguments(tmp_path):
    import argparse

    from arvis.models.mar import export_mar_checkpoint, load_mar_checkpoint
    from arvis.tokenizers.mar_vae import export_mar_vae_checkpoint, load_mar_vae_checkpoint
    from tests.pipelines.test_mar import tiny_mar, tiny_vae

    transformer, head = tiny_mar()
    path = tmp_path / "mar.pth"
    export_mar_checkpoint(transformer, head, path)
    for argument, value in (("num_heads", 0), ("img_size", 10**6), ("vae_stride", 0), ("num_heads", 4)):
        with pytest.raises(ConfigError, match=f"mar.pth.*{argument} = {value}"):
            load_mar_checkpoint(path, **{argument: value})
    assert load_mar_checkpoint(path, num_heads=2)[0].config.encoder_num_heads == 2  # agrees with the file
    from arvis.utils.serialization import load_pickle_checkpoint

    obj = load_pickle_checkpoint(path)
    obj["args"] = argparse.Namespace(**{**vars(obj["args"]), "arvis_config": None, "img_size": "big"})
    torch.save(obj, tmp_path / "args.pth")
    with pytest.raises(ConfigError, match="args.pth.*img_size = 'big'"):
        load_mar_checkpoint(tmp_path / "args.pth")
    vae = tmp_path / "kl.ckpt"
    export_mar_vae_checkpoint(tiny_vae(), vae)
    raw = torch.load(vae, weights_only=True)
    raw["model"]["encoder.conv_in.weight"] = [1.0]
    torch.save(raw, vae)
    with pytest.raises(CheckpointError, match="kl.ckpt: 'encoder.conv_in.weight' is a list, not a tensor"):
        load_mar_vae_checkpoint(vae, vae=tiny_vae())


# ----------------------------------------------------------------------------- Emu3
@pytest.fixture(scope="module")
def emu3_dir(tmp_path_factory) -> Path:
    from transformers import Emu3ForCausalLM

    from arvis.pipelines import Emu3Pipeline
    from tests.emu3_fixtures import tiny_emu3

    model, tok = tiny_emu3()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        draft = Emu3ForCausalLM(model.config.text_config).eval()
    path = tmp_path_factory.mktemp("emu3") / "emu3"
    Emu3Pipeline(model, tok, draft_transformer=draft, default_height=3, default_width=4,
                 default_negative_prompt="").save_pretrained(path)
    return path


def _edit_nested(path: Path, dotted: str, value) -> None:
    obj = json.loads(path.read_text())
    *parents, last = dotted.split(".")
    node = obj
    for key in parents:
        node = node[key]
    node[last] = value
    path.write_text(json.dumps(obj))


EMU3_HOSTILE = [
    ("transformer", "text_config.num_hidden_layers", 10**6, "text_config.num_hidden_layers = 1000000 is not an integer"),
    ("draft_transformer", "num_hidden_layers", 10**6, "num_hidden_layers = 1000000 is not an integer"),
    ("transformer", "text_config.num_attention_heads", 0, "text_config.num_attention_heads = 0 is not an integer"),
    ("transformer", "text_config.hidden_size", 2**20, "text_config.hidden_size = 1048576 is not an integer"),
    ("transformer", "text_config.vocab_size", 2**40, "text_config.vocab_size = 1099511627776 is not an integer"),
    ("transformer", "text_config.intermediate_size", -1, "text_config.intermediate_size = -1 is not an integer"),
    ("transformer", "text_config.max_position_embeddings", 2**40, "max_position_embeddings = 1099511627776 is not"),
    ("transformer", "vq_config.base_channels", 10**6, "vq_config.base_channels = 1000000 is not an integer"),
    ("transformer", "image_token_id", -1, "image_token_id = -1 is not an integer"),
    ("transformer", "model_type", "llama", "model_type = 'llama' is not one of 'emu3'"),
    ("transformer", "text_config.bogus", 1, "unknown config key 'text_config.bogus'"),
    ("transformer", "bogus", 1, "unknown config key 'bogus'"),
    ("transformer", "vocabulary_map", {"<image>": -5}, "vocabulary_map = {'<image>': -5} is not an object"),
]


@pytest.mark.reliability(area="loading: configurations",
                         probe="an Emu3 pipeline folder whose transformer (or draft) config.json says "
                               "num_hidden_layers = 10⁶, num_attention_heads = 0, hidden_size = 2²⁰, vocab_size = 2⁴⁰, "
                               "intermediate_size = -1, max_position_embeddings = 2⁴⁰, vq base_channels = 10⁶, "
                               "image_token_id = -1, model_type = \"llama\", a negative vocabulary id, or has an "
                               "unknown key (top level or nested)",
                         outcome="ConfigError naming the component's config.json and the (dotted) field, before "
                                 "anything is built (+1 GiB cap); it hung for minutes, raised ZeroDivisionError or a raw "
                                 "RuntimeError, or accepted the value")
@pytest.mark.parametrize("component, field, value, words", EMU3_HOSTILE)
def test_emu3_configs_are_bounded_before_allocation(emu3_dir, tmp_path, component, field, value, words):
    from arvis.pipelines import Emu3Pipeline

    folder = _copy(emu3_dir, tmp_path)
    _edit_nested(folder / component / "config.json", field, value)
    outcome, message = run_capped(lambda: Emu3Pipeline.from_pretrained(str(folder)))
    assert outcome == "ConfigError", message
    assert f"{component}/config.json" in message and words in message, message


@pytest.mark.reliability(area="loading: pipeline folders",
                         probe="an Emu3 folder whose weights do not fit its config (hidden_size 48 for width-32 "
                               "tensors), whose model.safetensors is truncated, whose tokenizer.json is not JSON, "
                               "not a tokenizer, or nested 10⁵ deep, whose tokenizer_config.json says bos_token = 5, "
                               "whose text config has 3 key/value heads for 4 heads, or whose model_index.json says "
                               "default_height = 10⁹",
                         outcome="CheckpointError or ConfigError naming the file (they raised raw RuntimeError, "
                                 "SafetensorError, JSONDecodeError, TypeError, RecursionError or Exception)")
@pytest.mark.parametrize("damage, error, words", [
    ("hidden", CheckpointError, "model.safetensors' does not fit the Emu3ForConditionalGeneration"),
    ("truncated", CheckpointError, "model.safetensors' could not be read as safetensors"),
    ("tokenizer-not-json", ConfigError, "tokenizer.json' is not valid JSON"),
    ("tokenizer-not-a-tokenizer", CheckpointError, "tokenizer.json' is not a tokenizer"),
    ("tokenizer-deep", ConfigError, "tokenizer.json' is nested deeper than"),
    ("bos", ConfigError, "tokenizer_config.json: bos_token = 5 is not a string"),
    ("kv-heads", ConfigError, "num_key_value_heads 3: the heads must divide the width and the key/value heads"),
    ("height", ConfigError, "model_index.json: default_height = 1000000000 is not an integer in"),
])
def test_damaged_emu3_folders_are_refused(emu3_dir, tmp_path, damage, error, words):
    from arvis.pipelines import Emu3Pipeline

    folder = _copy(emu3_dir, tmp_path)
    if damage == "hidden":
        _edit_nested(folder / "transformer" / "config.json", "text_config.hidden_size", 48)
    elif damage == "truncated":
        weights = folder / "draft_transformer" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "tokenizer-not-json":
        (folder / "tokenizer" / "tokenizer.json").write_text("{not json")
    elif damage == "tokenizer-not-a-tokenizer":
        (folder / "tokenizer" / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": 5}}')
    elif damage == "tokenizer-deep":
        (folder / "tokenizer" / "tokenizer.json").write_text("[" * 10**5 + "]" * 10**5)
    elif damage == "kv-heads":
        _edit_nested(folder / "transformer" / "config.json", "text_config.num_key_value_heads", 3)
    elif damage == "bos":
        edit_json(folder / "tokenizer" / "tokenizer_config.json", bos_token=5)
    else:
        edit_json(folder / "model_index.json", default_height=10**9)
    with pytest.raises(error, match=re.escape(words)):
        Emu3Pipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: official checkpoints",
                         probe="an official-layout Emu3 folder (BAAI/Emu3-Gen-hf style) with text_config."
                               "num_hidden_layers = 10⁶ or a damaged tokenizer.json",
                         outcome="ConfigError / CheckpointError naming the file before transformers builds anything")
def test_official_emu3_folder_is_checked(tmp_path):
    from transformers import Emu3ImageProcessor, Emu3Processor

    from arvis.pipelines import Emu3Pipeline
    from tests.emu3_fixtures import tiny_emu3

    model, tok = tiny_emu3()
    model.save_pretrained(tmp_path / "official")
    Emu3Processor(Emu3ImageProcessor(), tok).save_pretrained(tmp_path / "official")
    folder = _copy(tmp_path / "official", tmp_path / "copy")
    _edit_nested(folder / "config.json", "text_config.num_hidden_layers", 10**6)
    outcome, message = run_capped(lambda: Emu3Pipeline.from_pretrained(str(folder)))
    assert outcome == "ConfigError" and "config.json: text_config.num_hidden_layers = 1000000" in message, message
    folder = _copy(tmp_path / "official", tmp_path / "copy2")
    (folder / "tokenizer.json").write_text("[1, 2")
    with pytest.raises(ConfigError, match="tokenizer.json' is not valid JSON"):
        Emu3Pipeline.from_pretrained(str(folder))
    Emu3Pipeline.from_pretrained(str(tmp_path / "official"))  # the undamaged folder loads


# ----------------------------------------------------------------------------- the shipped folders pass
@pytest.mark.parametrize("alias", shipped_names())
def test_every_shipped_folder_passes_the_checks(alias):
    """The bounds are generous: every shipped pipeline (and each component's weights header) passes them."""
    from arvis.hub import pipeline_class, shipped_path
    from arvis.utils.config_check import check_pipeline_folder

    folder = shipped_path(alias)
    check_pipeline_folder(pipeline_class(folder), folder)


# ----------------------------------------------------------------------------- CLIP preprocessing, upsampler, video
@pytest.mark.reliability(area="loading: configurations",
                         probe="a CLIP folder whose preprocess_cfg says size = 10⁶ (or a size other than the "
                               "vision tower's), mean with 2 values, std = 0, or has an unknown key; a top-level key "
                               "that is neither model_cfg nor preprocess_cfg",
                         outcome="ConfigError naming open_clip_config.json and the field, before open_clip builds "
                                 "anything (size = 10⁶ was accepted and would have resized every image to 10⁶ px)")
@pytest.mark.parametrize("change, words", [
    ({"preprocess_cfg.size": 10**6}, "preprocess_cfg.size = 1000000 is not an integer in"),
    ({"preprocess_cfg.size": 64}, "preprocess_cfg.size = 64 differs from the vision tower's image_size"),
    ({"preprocess_cfg.mean": [0.5, 0.5]}, "preprocess_cfg.mean = [0.5, 0.5] is not a list of 3"),
    ({"preprocess_cfg.std": [0.5, 0.0, 0.5]}, "preprocess_cfg.std = [0.5, 0.0, 0.5] is not a list of 3"),
    ({"preprocess_cfg.sise": 128}, "unknown config key 'preprocess_cfg.sise' (did you mean 'size'?)"),
    ({"extra": 1}, "unknown config key 'extra'"),
])
def test_clip_preprocessing_is_bounded(tmp_path, change, words):
    from arvis.eval.clip_score import load_clip
    from tests.models.test_hostile_loaders import ROOT

    folder = _copy(ROOT / "arvis" / "weights" / "clip-scenes", tmp_path)
    for dotted, value in change.items():
        _edit_nested(folder / "open_clip_config.json", dotted, value)
    outcome, message = run_capped(lambda: load_clip(str(folder)))
    assert outcome == "ConfigError" and "open_clip_config.json" in message and words in message, message


@pytest.mark.reliability(area="loading: configurations",
                         probe="the LlamaGen pipeline's upsampler folder (TokenUpsampler) with dim = 2²⁰, "
                               "low_grid = 10⁵ or an unknown key; a video transformer whose num_frames × frame_size² "
                               "exceeds 2¹⁶ tokens",
                         outcome="ConfigError naming config.json and the field before anything is allocated (+1 GiB "
                                 "cap); the upsampler started allocating (dim) and ignored the unknown key, the video "
                                 "model already refused")
@pytest.mark.parametrize("component, changes, words", [
    ("upsampler", {"dim": 2**20}, "dim = 1048576 is not an integer in"),
    ("upsampler", {"low_grid": 10**5}, "low_grid = 100000 is not an integer in"),
    ("upsampler", {"lowgrid": 8}, "unknown config key 'lowgrid' (did you mean 'low_grid'?)"),
    ("video", {"num_frames": 1024, "frame_size": 256}, "num_frames * frame_size**2 must be <= 65536"),
])
def test_upsampler_and_video_configs_are_bounded(tmp_path, component, changes, words):
    from arvis.models.upsampler import TokenUpsampler
    from arvis.models.video import VideoTransformer
    from tests.pipelines.video.test_video import tiny_video

    folder = tmp_path / component
    if component == "upsampler":
        TokenUpsampler(vocab_size=16, low_grid=2, dim=8, groups=4, num_classes=2).save_pretrained(folder)
        cls = TokenUpsampler
    else:
        tiny_video().save_pretrained(folder)
        cls = VideoTransformer
    edit_json(folder / "config.json", **changes)
    outcome, message = run_capped(lambda: cls.from_pretrained(str(folder)))
    assert outcome == "ConfigError" and "config.json" in message and words in message, message


# ----------------------------------------------------------------------------- non-finite decoders
def _poison(module: torch.nn.Module) -> None:
    """NaN in the decoder's last convolution: every pixel it writes is NaN."""
    conv = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Conv3d)][-1]
    with torch.no_grad():
        conv.weight.fill_(float("nan"))


@pytest.mark.reliability(area="decoding",
                         probe="NaN in the image decoder (the VQ decoder of LlamaGen, VAR, video and Emu3, MAR's KL-VAE "
                               "decoder), with output_type np, pt and pil",
                         outcome="NonFiniteError (an ArvisError) saying the decoder produced NaN or infinite pixels "
                                 "and which images (it returned NaN arrays, or black PIL images, silently); NaN in the "
                                 "transformer was already refused")
@pytest.mark.parametrize("family", ["llamagen", "var", "mar", "video", "emu3"])
@pytest.mark.parametrize("output_type", ["np", "pt", "pil"])
def test_non_finite_decoder_output_is_refused(family, output_type):
    from arvis.engine.engine import NonFiniteError
    from arvis.errors import ArvisError

    if family == "llamagen":
        from arvis.hub import tiny_random_pipeline

        pipe, decoder, call = tiny_random_pipeline(), None, {"class_labels": [0]}
        decoder = pipe.vqvae.decoder
    elif family == "var":
        from tests.pipelines.test_var import tiny_pipeline

        pipe, call = tiny_pipeline(), {"class_labels": [0]}
        decoder = pipe.vqvae.decoder
    elif family == "mar":
        from tests.pipelines.test_mar import tiny_pipeline

        pipe, call = tiny_pipeline(), {"class_labels": [0], "num_iter": 2}
        decoder = pipe.vae.decoder
    elif family == "video":
        from tests.pipelines.video.test_video import tiny_pipeline

        pipe, call = tiny_pipeline(), {"class_labels": [0]}
        decoder = pipe.vqvae.decoder
    else:
        from arvis.pipelines import Emu3Pipeline
        from tests.emu3_fixtures import tiny_emu3

        model, tok = tiny_emu3()
        pipe = Emu3Pipeline(model, tok, default_height=2, default_width=2, default_negative_prompt="")
        call, decoder = {"prompt": ["red apple"]}, model.model.vqmodel.decoder
    pipe.set_progress_bar_config(disable=True)
    _poison(decoder)
    with pytest.raises(NonFiniteError, match=r"decoder produced NaN or infinite pixels \((image|clip) 0 of 1\)") as err:
        pipe(**call, generator=torch.Generator().manual_seed(0), output_type=output_type)
    assert isinstance(err.value, ArvisError)
