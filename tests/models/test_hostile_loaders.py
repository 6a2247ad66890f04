"""Hostile and careless inputs to the loaders: every probe ends in a clear arvis error, or loads correctly.

Each test declares the docs/reliability.md row it proves (tests/reliability_rows.py). Models are tiny;
probes that would reserve gigabytes run in a forked child whose address space is capped at its current
size + 1 GiB, so "nothing was allocated" is checked, not assumed (before the bounds existed these
probes died there with an allocation error, or were OOM-killed).
"""

from __future__ import annotations

import argparse
import builtins
import errno
import io
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from arvis.errors import ArvisError, CheckpointError, ConfigError
from arvis.models.checkpoint import export_llamagen_checkpoint, load_llamagen_checkpoint
from arvis.models.llamagen import LLAMAGEN_CONFIG_BOUNDS, LlamaGenTransformer
from arvis.models.protocol import Condition
from arvis.pipelines import LlamaGenPipeline
from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
from tests import REPO_ROOT as ROOT
from tests.conftest import tiny_llamagen

HUGE = {"block_size": 8192**2, "cls_token_num": 10**9, "dim": 2**20, "n_layer": 10**6}


def run_capped(fn: Callable[[], object], headroom: int = 1 << 30) -> tuple[str, str]:
    """Run ``fn`` in a forked child whose address space may grow by ``headroom`` bytes only.

    Returns:
        ``(outcome, message)``: ``("ok", "")`` or the exception's class name and message.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_end)
        try:
            with open("/proc/self/statm") as f:
                size = int(f.read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (size + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))
            try:
                fn()
                result = ("ok", "")
            except BaseException as err:  # noqa: BLE001 - reported to the parent
                result = (type(err).__name__, str(err))
            os.write(write_end, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return tuple(json.loads(data)) if data else ("killed", "")


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory) -> Path:
    g = torch.Generator().manual_seed(0)
    vq = LlamaGenVQModel(codebook_size=32, codebook_embed_dim=4, encoder_ch_mult=(1, 2), decoder_ch_mult=(1, 2),
                         z_channels=8, base_channels=8, norm_num_groups=4).init_weights(g)
    path = tmp_path_factory.mktemp("pipe")
    LlamaGenPipeline(tiny_llamagen("c2i"), vq.eval()).save_pretrained(path)
    return path


def variant(pipeline_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "pipe"
    shutil.copytree(pipeline_dir, copy)
    return copy


def edit_json(path: Path, **changes) -> None:
    obj = json.loads(path.read_text())
    obj.update(changes)
    path.write_text(json.dumps(obj))


# ----------------------------------------------------------------------------- configurations
@pytest.mark.reliability(area="loading: configurations",
                         probe="a model folder's config.json with block_size = 8192², cls_token_num = 10⁹, dim = 2²⁰ or "
                               "n_layer = 10⁶ (GPT, pipeline)",
                         outcome="ConfigError naming config.json, the field and its bounds, before anything is allocated "
                                 "(checked under a +1 GiB address-space cap)")
@pytest.mark.parametrize("field", list(HUGE))
def test_folder_config_values_are_bounded_before_allocation(pipeline_dir, tmp_path, field):
    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", **{field: HUGE[field]})
    outcome, message = run_capped(lambda: LlamaGenPipeline.from_pretrained(str(folder)))
    assert outcome == "ConfigError", message
    assert f"transformer/config.json: {field} = {HUGE[field]}" in message and "is not an integer in" in message


@pytest.mark.reliability(area="loading: configurations",
                         probe="an official-layout .pt whose pickled args (arvis_config, or image_size / downsample_size) "
                               "say block_size = 8192², cls_token_num = 10⁹, dim = 2²⁰ or n_layer = 10⁶",
                         outcome="ConfigError naming the file and the args field, before anything is allocated "
                                 "(+1 GiB cap)")
@pytest.mark.parametrize("field", [*HUGE, "image_size"])
def test_pickled_args_are_bounded_before_allocation(tmp_path, field):
    model = tiny_llamagen("c2i")
    path = tmp_path / "model.pt"
    if field == "image_size":
        args = argparse.Namespace(image_size=8192 * 16, downsample_size=16, n_head=4)
    else:
        args = argparse.Namespace(arvis_config={**{k: v for k, v in model.config.items() if not k.startswith("_")},
                                                field: HUGE[field]})
    torch.save({"model": model.state_dict(), "args": args}, path)
    outcome, message = run_capped(lambda: load_llamagen_checkpoint(path))
    assert outcome == "ConfigError", message
    assert str(path) in message and (field in message or "block_size" in message)


@pytest.mark.reliability(area="loading: configurations",
                         probe="a .safetensors file whose metadata arvis_config says block_size = 8192² (or dim = 2²⁰…)",
                         outcome="ConfigError naming the file and the field, before anything is allocated (+1 GiB cap)")
@pytest.mark.parametrize("field", list(HUGE))
def test_safetensors_metadata_is_bounded_before_allocation(tmp_path, field):
    model = tiny_llamagen("c2i")
    path = tmp_path / "model.safetensors"
    export_llamagen_checkpoint(model, path)
    config = json.loads(load_file_metadata(path)["arvis_config"])
    config[field] = HUGE[field]
    save_file(load_file(path), path, metadata={"format": "pt", "arvis_config": json.dumps(config)})
    outcome, message = run_capped(lambda: load_llamagen_checkpoint(path))
    assert outcome == "ConfigError" and f"{field} = {HUGE[field]}" in message, message


def load_file_metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata()


@pytest.mark.reliability(area="loading: configurations",
                         probe="config.json with an unknown or misspelt key (n_layers for n_layer, bogus)",
                         outcome="ConfigError naming the file and the key, with the nearest known key (diffusers "
                                 "would ignore it with a warning and build the default 32-layer model)")
@pytest.mark.parametrize("key, hint", [("n_layers", "did you mean 'n_layer'"), ("bogus", "known keys")])
def test_unknown_config_keys_are_refused(pipeline_dir, tmp_path, key, hint):
    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", **{key: 2})
    with pytest.raises(ConfigError, match=f"config.json: unknown config key '{key}'.*{hint}"):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: configurations",
                         probe="config.json values of the wrong type or not finite (dim = \"32\", n_layer = 2.5, "
                               "norm_eps = NaN, model_type = \"x\", class_names = 5)",
                         outcome="ConfigError naming the file, the field and what it may hold")
@pytest.mark.parametrize("field, value", [("dim", "32"), ("n_layer", 2.5), ("norm_eps", float("nan")),
                                          ("model_type", "x"), ("class_names", 5), ("n_kv_head", True)])
def test_mistyped_config_values_are_refused(pipeline_dir, tmp_path, field, value):
    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", **{field: value})
    with pytest.raises(ConfigError, match=f"transformer/config.json: {field} = .* is not "):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: configurations",
                         probe="config.json that contradicts its weights (dim 16 for width-32 tensors; n_layer 3 for 2 "
                               "layers; vocab_size 64 for 32 codes)",
                         outcome="CheckpointError naming the safetensors file and the first mis-shaped, missing or "
                                 "unexpected tensors, from the header alone (no tensor read)")
@pytest.mark.parametrize("field, value, words", [("dim", 16, "shape mismatches"), ("n_layer", 3, "missing keys"),
                                                 ("vocab_size", 64, "tok_embeddings.weight")])
def test_config_is_checked_against_the_weights_header(pipeline_dir, tmp_path, field, value, words):
    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", **{field: value})
    with pytest.raises(CheckpointError, match=f"diffusion_pytorch_model.safetensors' does not fit .*{words}"):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: configurations",
                         probe="config.json edited in a field no tensor shape reveals (n_head 4 → 2 or 1, norm_eps) in a "
                               "folder arvis saved",
                         outcome="ConfigError naming config.json, the field, its value and the value the weights were "
                                 "saved with (recorded in the safetensors metadata); folders without the record "
                                 "(official, older) load as before")
@pytest.mark.parametrize("field, value", [("n_head", 2), ("n_head", 1), ("norm_eps", 1e-3)])
def test_shape_invisible_config_edits_are_caught(pipeline_dir, tmp_path, field, value):
    from arvis.utils.serialization import CONFIG_METADATA_KEY, read_safetensors_header

    weights = pipeline_dir / "transformer" / "diffusion_pytorch_model.safetensors"
    assert json.loads(read_safetensors_header(weights).metadata[CONFIG_METADATA_KEY])["n_head"] == 4
    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", **{field: value})
    with pytest.raises(ConfigError, match=rf"config.json'?: {field} = {value!r}, but the weights .* saved with {field}"):
        LlamaGenPipeline.from_pretrained(str(folder))
    # The same edit in a folder without the record (as official or older folders are) is not detectable.
    from safetensors.torch import load_file, save_file

    stripped = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file(load_file(stripped), stripped, metadata={"format": "pt"})
    LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: configurations",
                         probe="constructing a GPT with block_size at its bound (128×128 tokens) on the meta device, "
                               "as shape checks and diffusers' empty-weight loading do",
                         outcome="no rotary table is built until the first forward (it was built eagerly, on the CPU, "
                                 "even on the meta device)")
def test_rope_table_is_built_lazily():
    with torch.device("meta"):
        big = LlamaGenTransformer.from_preset("GPT-XL", block_size=LLAMAGEN_CONFIG_BOUNDS["block_size"].high)
    assert big._rope_table is None
    model = tiny_llamagen("c2i")
    assert model._rope_table is None
    cache = model.allocate_cache(1)
    model.prefill(Condition(class_labels=torch.tensor([0])), cache)
    assert model._rope_table is not None and model._rope_table.shape == (1 + 16, 4, 2)


def test_every_constructor_argument_has_a_declared_bound():
    """A field without a bound would be refused as unknown in config.json: the tables must be complete."""
    import inspect

    from arvis.eval.domain import DomainClassifier
    from arvis.models.text_encoder import WordTextEncoder

    for cls in (LlamaGenTransformer, LlamaGenVQModel, WordTextEncoder, DomainClassifier):
        params = set(inspect.signature(cls.__init__).parameters) - {"self"}
        assert set(cls.config_bounds) == params, cls.__name__


# ----------------------------------------------------------------------------- weights
def _official(model: LlamaGenTransformer, **sd_changes) -> dict:
    sd = {**model.state_dict(), **sd_changes}
    return {"model": sd, "args": argparse.Namespace(image_size=64, downsample_size=16, n_head=4)}


@pytest.mark.reliability(area="loading: weights",
                         probe="a checkpoint whose state dict holds a non-tensor value (a list where norm.weight should be)",
                         outcome="CheckpointError naming the file and the key")
def test_non_tensor_values_are_refused(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(_official(tiny_llamagen("c2i"), **{"norm.weight": [1.0] * 32}), path)
    with pytest.raises(CheckpointError, match=r"m.pt: 'norm.weight' is a list, not a tensor"):
        load_llamagen_checkpoint(path)


@pytest.mark.reliability(area="loading: weights",
                         probe="weights of integer, bool or complex dtype (a .pt state dict, a folder's safetensors)",
                         outcome="CheckpointError naming the file, the tensor and its dtype (it loaded before, giving a "
                                 "wrong model or an error deep in the first forward)")
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, torch.uint8])
def test_non_floating_weights_are_refused(tmp_path, pipeline_dir, dtype):
    path = tmp_path / "m.pt"
    torch.save(_official(tiny_llamagen("c2i"), **{"norm.weight": torch.ones(32, dtype=dtype)}), path)
    with pytest.raises(CheckpointError, match=f"'norm.weight' has dtype {dtype}; weights must be floating point"):
        load_llamagen_checkpoint(path)
    if dtype is torch.complex64:
        return  # safetensors has no complex dtype
    folder = variant(pipeline_dir, tmp_path)
    weights = folder / "vqvae" / "diffusion_pytorch_model.safetensors"
    sd = load_file(weights)
    sd["quant_conv.bias"] = sd["quant_conv.bias"].to(dtype)
    save_file(sd, weights)
    with pytest.raises(CheckpointError, match="'quant_conv.bias' has dtype .*; weights must be floating point"):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: weights",
                         probe="a checkpoint mixing fp16 and fp32 tensors (.pt and a folder's safetensors)",
                         outcome="loads with one dtype (float32) and gives the logits of the same weights in float32")
def test_mixed_dtypes_load_as_one_dtype(tmp_path, pipeline_dir):
    model = tiny_llamagen("c2i")
    mixed = {k: (v.half() if i % 2 else v) for i, (k, v) in enumerate(model.state_dict().items())}
    path = tmp_path / "m.pt"
    config = {k: v for k, v in model.config.items() if not k.startswith("_")}
    torch.save({"model": mixed, "args": argparse.Namespace(arvis_config=config)}, path)
    loaded = load_llamagen_checkpoint(path)
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    reference = tiny_llamagen("c2i")
    reference.load_state_dict({k: v.float() for k, v in mixed.items()})
    condition = Condition(class_labels=torch.tensor([1]))
    logits = [m.prefill(condition, m.allocate_cache(1))[0] for m in (loaded, reference)]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)

    folder = variant(pipeline_dir, tmp_path)
    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file({k: (v.half() if i % 2 else v) for i, (k, v) in enumerate(load_file(weights).items())}, weights)
    assert {p.dtype for p in LlamaGenPipeline.from_pretrained(str(folder)).transformer.parameters()} == {torch.float32}


@pytest.mark.reliability(area="loading: weights",
                         probe="a pickled weights file (.bin) in a model folder, with no safetensors",
                         outcome="CheckpointError: folders load from safetensors only, with the conversion command; the "
                                 "pickle is never opened (its payload does not run)")
def test_pickle_in_a_folder_is_refused_unopened(pipeline_dir, tmp_path):
    folder = variant(pipeline_dir, tmp_path)
    weights = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    weights.unlink()
    sentinel = tmp_path / "pwned"
    (folder / "transformer" / "diffusion_pytorch_model.bin").write_bytes(
        b"cos\nsystem\n(S'touch " + str(sentinel).encode() + b"'\ntR.")
    with pytest.raises(CheckpointError, match="pickled weights .*safetensors only.*save_file"):
        LlamaGenPipeline.from_pretrained(str(folder))
    assert not sentinel.exists()


@pytest.mark.reliability(area="loading: weights",
                         probe="unreadable paths: a config.json, model_index.json or checkpoint that cannot be read "
                               "(EACCES), a folder where a file should be, a missing folder or file",
                         outcome="CheckpointError naming the path and the reason")
def test_unreadable_paths_are_named(pipeline_dir, tmp_path, monkeypatch):
    folder = variant(pipeline_dir, tmp_path)
    checkpoint = tmp_path / "m.pt"
    export_llamagen_checkpoint(tiny_llamagen("c2i"), checkpoint)
    with pytest.raises(CheckpointError, match="does not exist"):
        LlamaGenPipeline.from_pretrained(str(tmp_path / "nowhere"))
    with pytest.raises(CheckpointError, match="no such file"):
        load_llamagen_checkpoint(tmp_path / "nowhere.pt")
    with pytest.raises(CheckpointError, match="is not a file"):
        load_llamagen_checkpoint(tmp_path)

    denied = {folder / "model_index.json", checkpoint}
    real_open = io.open

    def deny(file, *args, **kwargs):  # chmod 000 does not stop root; refuse the way the kernel would
        if isinstance(file, str | os.PathLike) and Path(file) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", deny)
    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(CheckpointError, match=r"model_index.json' could not be read \(PermissionError"):
        LlamaGenPipeline.from_pretrained(str(folder))
    with pytest.raises(CheckpointError, match=r"m.pt' could not be read \(PermissionError"):
        load_llamagen_checkpoint(checkpoint)
    denied.clear()
    denied.add(folder / "transformer" / "config.json")
    with pytest.raises(CheckpointError, match=r"transformer/config.json' could not be read \(PermissionError"):
        LlamaGenPipeline.from_pretrained(str(folder))
    monkeypatch.undo()

    (folder / "transformer" / "config.json").unlink()
    (folder / "transformer" / "config.json").mkdir()  # a folder where the file should be
    with pytest.raises(CheckpointError, match="transformer' has no config.json"):
        LlamaGenPipeline.from_pretrained(str(folder))


# ----------------------------------------------------------------------------- pipeline folders
def _unet(path: Path) -> None:
    from diffusers import UNet2DModel

    UNet2DModel(sample_size=8, block_out_channels=(8, 16), norm_num_groups=4, layers_per_block=1,
                down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D")
                ).save_pretrained(path)


@pytest.mark.reliability(area="loading: pipeline folders",
                         probe="a component of the wrong class: model_index.json naming a diffusers UNet2DModel as the "
                               "transformer, or a UNet's folder where the LlamaGen transformer should be",
                         outcome="CheckpointError naming model_index.json (or the component's config.json), the component "
                                 "and the class expected, before the component is loaded")
def test_component_of_the_wrong_class_is_refused(pipeline_dir, tmp_path):
    folder = variant(pipeline_dir, tmp_path)
    shutil.rmtree(folder / "transformer")
    _unet(folder / "transformer")
    with pytest.raises(CheckpointError, match="transformer/config.json' describes a UNet2DModel, not a "
                                              "LlamaGenTransformer"):
        LlamaGenPipeline.from_pretrained(str(folder))
    edit_json(folder / "model_index.json", transformer=["diffusers", "UNet2DModel"])
    with pytest.raises(CheckpointError, match="transformer is a diffusers.UNet2DModel, but LlamaGenPipeline takes "
                                              "a LlamaGenTransformer there"):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: pipeline folders",
                         probe="a damaged model_index.json: not JSON, a list, an unknown component, a component naming "
                               "os.system, a listed component without its folder, a required component set to null",
                         outcome="CheckpointError naming model_index.json and the entry, before diffusers imports or "
                                 "loads anything")
@pytest.mark.parametrize("damage, words", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"scheduler": ["diffusers", "DDIMScheduler"]}, "unknown component 'scheduler'"),
    ({"transformer": ["os", "system"]}, "transformer is a os.system"),
    ({"draft_transformer": ["arvis", "LlamaGenTransformer"]}, "has no draft_transformer/ folder"),
    ({"vqvae": [None, None]}, "required component 'vqvae' is null"),
])
def test_damaged_model_index_is_refused(pipeline_dir, tmp_path, damage, words):
    folder = variant(pipeline_dir, tmp_path)
    index = folder / "model_index.json"
    if isinstance(damage, str):
        index.write_text(damage)
    else:
        edit_json(index, **damage)
    with pytest.raises(CheckpointError, match=words):
        LlamaGenPipeline.from_pretrained(str(folder))


# ----------------------------------------------------------------------------- official checkpoints
@pytest.mark.reliability(area="loading: official checkpoints",
                         probe="a valid official-layout .pt of a size no preset has (4 layers, width 256) whose pickled "
                               "args say n_head = 8",
                         outcome="loads with the args' head count and gives the original model's logits exactly (it was "
                                 "refused: \"cannot infer the head count … no official preset matches\")")
def test_custom_size_checkpoint_reads_its_head_count_from_args(tmp_path):
    model = LlamaGenTransformer(dim=256, n_layer=4, n_head=8, vocab_size=64, block_size=16, num_classes=5)
    model.init_weights(torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.output.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "custom.pt"
    torch.save({"model": model.state_dict(), "steps": 10,
                "args": argparse.Namespace(gpt_model=None, image_size=64, downsample_size=16, n_head=8)}, path)
    loaded = load_llamagen_checkpoint(path)
    assert (loaded.config.n_head, loaded.config.n_layer, loaded.config.dim) == (8, 4, 256)
    condition = Condition(class_labels=torch.tensor([2]))
    a = model.eval().prefill(condition, model.allocate_cache(1))[0]
    b = loaded.prefill(condition, loaded.allocate_cache(1))[0]
    assert torch.equal(a, b)
    # Without args there is no way to know the head count: a clear error saying what to pass.
    torch.save({"model": model.state_dict()}, tmp_path / "bare.pt")
    with pytest.raises(ConfigError, match="cannot infer the head count .* pass n_head="):
        load_llamagen_checkpoint(tmp_path / "bare.pt", block_size=16)
    assert load_llamagen_checkpoint(tmp_path / "bare.pt", block_size=16, n_head=8).config.n_head == 8


@pytest.mark.reliability(area="loading: official checkpoints",
                         probe="pickled args whose gpt_model preset contradicts the weights' shape (GPT-L args on a "
                               "2-layer, width-32 model)",
                         outcome="ConfigError naming the args field and both shapes (the preset's head count was used "
                                 "as is, which can silently give a wrong model when the width divides)")
def test_args_preset_contradicting_the_shapes_is_refused(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"model": tiny_llamagen("c2i").state_dict(),
                "args": argparse.Namespace(gpt_model="GPT-L", image_size=64, downsample_size=16)}, path)
    with pytest.raises(ConfigError, match="gpt_model=GPT-L \\(24 layers of width 1024\\) but the weights have 2 "
                                          "layers of width 32"):
        load_llamagen_checkpoint(path)


# ----------------------------------------------------------------------------- evaluator networks
@pytest.mark.reliability(area="loading: configurations",
                         probe="hostile configs of the VQ tokenizer, text encoder, domain network and CLIP folders "
                               "(base_channels = 10⁶, dim = 2²⁰, channels = [2²⁰], vision width = 2²⁰, an unknown key)",
                         outcome="ConfigError naming the file and the field before anything is allocated (+1 GiB cap)")
@pytest.mark.parametrize("component", ["vq", "text_encoder", "domain", "clip", "clip_unknown_key"])
def test_tokenizer_and_evaluator_configs_are_bounded(tmp_path, component):
    from arvis.eval.clip_score import load_clip
    from arvis.eval.domain import DomainClassifier, load_domain_network, save_domain_network
    from arvis.models.text_encoder import WordTextEncoder

    folder = tmp_path / component
    if component == "vq":
        LlamaGenVQModel(codebook_size=32, codebook_embed_dim=4, encoder_ch_mult=(1, 2), decoder_ch_mult=(1, 2),
                        z_channels=8, base_channels=8, norm_num_groups=4).save_pretrained(folder)
        edit_json(folder / "config.json", base_channels=10**6)
        load, field = (lambda: LlamaGenVQModel.from_pretrained(str(folder))), "base_channels"
    elif component == "text_encoder":
        WordTextEncoder(["a", "b"], dim=8, num_layers=1, num_heads=2).save_pretrained(folder)
        edit_json(folder / "config.json", dim=2**20)
        load, field = (lambda: WordTextEncoder.from_pretrained(str(folder))), "dim"
    elif component == "domain":
        save_domain_network(DomainClassifier(num_classes=2, image_size=16, channels=(4, 8), norm_groups=2), folder)
        edit_json(folder / "config.json", channels=[2**20])
        load, field = (lambda: load_domain_network(folder)), "channels"
    else:
        shutil.copytree(ROOT / "arvis" / "weights" / "clip-scenes", folder)
        config = json.loads((folder / "open_clip_config.json").read_text())
        if component == "clip":
            config["model_cfg"]["vision_cfg"]["width"] = 2**20
            field = "vision_cfg.width"
        else:
            config["model_cfg"]["text_cfg"]["widht"] = 64
            field = "unknown config key 'text_cfg.widht'"
        (folder / "open_clip_config.json").write_text(json.dumps(config))
        load = lambda: load_clip(str(folder))  # noqa: E731
    outcome, message = run_capped(load)
    assert outcome == "ConfigError" and field in message, message


@pytest.mark.reliability(area="loading: configurations",
                         probe="an open_clip model_cfg whose shapes differ from its safetensors weights (text width 32 "
                               "for a width-64 tower)",
                         outcome="CheckpointError naming the weights file and the mis-shaped tensors, before open_clip "
                                 "builds the model")
def test_clip_config_is_checked_against_the_weights_header(tmp_path):
    from arvis.eval.clip_score import load_clip

    folder = tmp_path / "clip"
    shutil.copytree(ROOT / "arvis" / "weights" / "clip-scenes", folder)
    config = json.loads((folder / "open_clip_config.json").read_text())
    config["model_cfg"]["text_cfg"]["width"] = 32
    (folder / "open_clip_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="open_clip_model.safetensors' does not fit the CLIP .*shape mismatches"):
        load_clip(str(folder))


# ----------------------------------------------------------------------------- command lines
@pytest.mark.reliability(area="loading: command lines",
                         probe="`arvis generate --model` and `eval/sample.py --model` given a hostile folder "
                               "(config.json with block_size = 8192²)",
                         outcome="one line on stderr (\"…: error: …config.json: block_size = 67108864 is not an integer "
                                 "in [1, 16384]…\"), exit code 2, no traceback, nothing written")
def test_command_lines_print_one_line_and_exit_2(pipeline_dir, tmp_path, capsys):
    from arvis.cli import main as arvis_main

    folder = variant(pipeline_dir, tmp_path)
    edit_json(folder / "transformer" / "config.json", block_size=8192**2)

    def one_error_line(stderr: str) -> None:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "error:" in lines[0] and "block_size = 67108864" in lines[0], stderr
        assert "Traceback" not in stderr

    assert arvis_main(["generate", "--model", str(folder), "--output", str(tmp_path / "gen")]) == 2
    one_error_line(capsys.readouterr().err)
    # A whole process (the real entry point, imports and all), once.
    done = subprocess.run([sys.executable, str(ROOT / "eval" / "sample.py"), "--model", str(folder), "--num-images",
                           "2", "--output", str(tmp_path / "samples"), "--no-progress"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 2, done.stderr
    one_error_line(done.stderr)
    assert not (tmp_path / "gen").exists() and not (tmp_path / "samples").exists()


def test_all_arvis_errors_are_value_errors():
    """Callers that catch ValueError (and the CLI's existing handler) catch the whole hierarchy."""
    from arvis.errors import JobError, StorageError

    for cls in (CheckpointError, ConfigError, JobError, StorageError):
        assert issubclass(cls, ArvisError) and issubclass(cls, ValueError)


# ----------------------------------------------------------------------------- weights that ask for more than they hold
def _expanded(shapes: dict[str, tuple[int, ...]], dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """Every tensor a stride-0 view of one stored value: ``torch.save`` writes 2 bytes per tensor."""
    return {k: torch.zeros(1, dtype=dtype).expand(*shape) for k, shape in shapes.items()}


@pytest.mark.reliability(area="loading: weights",
                         probe="a 14 KB .pt whose every tensor is an expanded (stride-0) view of one fp16 value, shaped "
                               "as a 4096-wide, 8-layer GPT (1.75 G parameters), loaded with dtype=float32; the same with "
                               "one real fp32 tensor among them and no dtype; a VAR .pth and a KL-VAE .ckpt built the "
                               "same way; a 1.65 G-parameter GPT whose every tensor is a view of the start of one "
                               "stored 23 MB tensor",
                         outcome="CheckpointError naming the file and the tensor (or the total), before anything is "
                                 "allocated (+1 GiB cap): a file may ask for at most the bytes it holds, times the dtype "
                                 "cast (it materialised gigabytes from kilobytes)")
@pytest.mark.parametrize("case", ["llamagen-dtype", "llamagen-mixed", "var", "kl-vae", "shared-storage"])
def test_expanded_tensors_cannot_inflate_a_file(tmp_path, case):
    from arvis.models.var import VARTransformer, load_var_checkpoint
    from arvis.tokenizers.mar_vae import build_kl_vae, load_mar_vae_checkpoint

    path = tmp_path / "bomb.pt"
    if case.startswith("llamagen"):
        with torch.device("meta"):
            big = LlamaGenTransformer(dim=4096, n_layer=8, n_head=32, vocab_size=16384, block_size=256, num_classes=10)
        sd = _expanded({k: tuple(v.shape) for k, v in big.state_dict().items()})
        if case == "llamagen-mixed":
            sd["norm.weight"] = torch.ones(4096)  # one real fp32 tensor: the common dtype becomes float32
        config = {k: v for k, v in big.config.items() if not k.startswith("_")}
        torch.save({"model": sd, "args": argparse.Namespace(arvis_config=config)}, path)
        load = (lambda: load_llamagen_checkpoint(path, dtype=torch.float32)) if case == "llamagen-dtype" else (
            lambda: load_llamagen_checkpoint(path))
    elif case == "var":
        from arvis.models.var import official_state_dict

        with torch.device("meta"):
            big = VARTransformer(depth=16, embed_dim=2048, num_heads=16, vocab_size=16384)
        shapes = {k: tuple(v.shape) for k, v in official_state_dict(big).items()}
        levels = big.scale_layout.scale_of_positions()
        bias = torch.where(levels[:, None] >= levels[None, :], 0.0, float("-inf")).half()
        sd = {**_expanded({k: s for k, s in shapes.items() if k not in ("lvl_1L", "attn_bias_for_masking")}),
              "lvl_1L": levels[None], "attn_bias_for_masking": bias[None, None]}
        torch.save(sd, path)
        load = lambda: load_var_checkpoint(path, dtype=torch.float32)  # noqa: E731
    elif case == "kl-vae":
        from arvis.tokenizers.mar_vae import diffusers_to_official

        with torch.device("meta"):
            vae = build_kl_vae(block_out_channels=(1024, 1024, 2048, 2048, 4096))
        torch.save({"model": _expanded({k: tuple(v.shape) for k, v in diffusers_to_official(vae).items()})}, path)
        load = lambda: load_mar_vae_checkpoint(path, vae=vae, dtype=torch.float32)  # noqa: E731
    else:  # every tensor a view of the start of one stored tensor (each view fits in it; together they do not)
        with torch.device("meta"):
            big = LlamaGenTransformer(dim=2048, n_layer=32, n_head=16, vocab_size=1024, block_size=256, num_classes=10)
        shapes = {k: tuple(v.shape) for k, v in big.state_dict().items()}
        storage = torch.zeros(max(math.prod(s) for s in shapes.values()), dtype=torch.float16)
        sd = {k: storage[: math.prod(s)].view(s) for k, s in shapes.items()}
        config = {k: v for k, v in big.config.items() if not k.startswith("_")}
        torch.save({"model": sd, "args": argparse.Namespace(arvis_config=config)}, path)
        load = lambda: load_llamagen_checkpoint(path, dtype=torch.float32)  # noqa: E731
    assert path.stat().st_size < 40 << 20
    outcome, message = run_capped(load)
    assert outcome == "CheckpointError", message
    assert str(path) in message and ("stride-0" in message or "more than the file holds" in message), message


# ----------------------------------------------------------------------------- linked components
def _old_folder_sha256(folder: Path) -> str:
    """The content hash as arvis computed it before links were checked (every link followed)."""
    import hashlib

    digest = hashlib.sha256()
    suffixes = {".json", ".safetensors", ".bin", ".pt", ".model", ".txt"}
    files = [Path(root, name) for root, _, names in os.walk(folder, followlinks=True) for name in names]
    for file in sorted((p for p in files if p.is_file() and p.suffix in suffixes and p.name != "metrics.json"),
                       key=lambda p: p.relative_to(folder)):
        digest.update(file.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


@pytest.mark.reliability(area="loading: pipeline folders",
                         probe="a pipeline folder whose vqvae component is a link to /, /usr or ../../../../tmp (loaded "
                               "by name through arvis.hub, as the command lines do, and with from_pretrained); a link "
                               "the model index does not list",
                         outcome="CheckpointError naming the component and where it points, in well under a second "
                                 "(it hashed the whole tree behind the link first: minutes); a component may link "
                                 "only inside the folder, to a folder next to it (vqvae -> ../vq-photos) or to a "
                                 "shipped model folder; only listed components are followed and only the files directly "
                                 "in them hashed; the shipped folders' hashes are unchanged")
@pytest.mark.parametrize("target", ["/", "/usr", "../../../../tmp"])
def test_linked_components_stay_next_to_the_folder(pipeline_dir, tmp_path, target):
    import time

    from arvis.hub import SHIPPED_PIPELINES, WEIGHTS_DIR, folder_sha256, load_pipeline

    folder = variant(pipeline_dir, tmp_path)
    shutil.rmtree(folder / "vqvae")
    (folder / "vqvae").symlink_to(target)
    for load in (lambda: load_pipeline(str(folder)), lambda: LlamaGenPipeline.from_pretrained(str(folder))):
        start = time.monotonic()
        with pytest.raises(CheckpointError, match=f"vqvae is a link to .* outside {folder.name!r} and the folders "
                                                  f"next to it"):
            load()
        assert time.monotonic() - start < 5
    # A sibling folder is fine, and a link the index does not list is neither followed nor hashed.
    shutil.copytree(pipeline_dir / "vqvae", tmp_path / "vq-sibling")
    (folder / "vqvae").unlink()
    (folder / "vqvae").symlink_to("../vq-sibling")
    (folder / "notes").symlink_to("/usr")
    before = folder_sha256(folder)
    assert load_pipeline(str(folder)).model.sha256 == before
    for name in SHIPPED_PIPELINES.values():
        if (WEIGHTS_DIR / name / "model_index.json").is_file():
            assert folder_sha256(WEIGHTS_DIR / name) == _old_folder_sha256(WEIGHTS_DIR / name), name


# ----------------------------------------------------------------------------- late or wrong errors
@pytest.mark.reliability(area="loading: configurations",
                         probe="a config.json with a private key diffusers would pass on (__class__, _bogus), or nested "
                               "10⁵ levels deep",
                         outcome="ConfigError naming config.json and the key, or saying it is nested too deep (they "
                                 "raised diffusers' TypeError and a RecursionError)")
@pytest.mark.parametrize("damage, words", [("__class__", "unknown private config key '__class__'"),
                                           ("_bogus", "unknown private config key '_bogus'"),
                                           ("deep", "config.json' is nested deeper than")])
def test_private_keys_and_deep_configs_are_refused(pipeline_dir, tmp_path, damage, words):
    folder = variant(pipeline_dir, tmp_path)
    config = folder / "transformer" / "config.json"
    if damage == "deep":
        config.write_text("[" * 10**5 + "]" * 10**5)
    else:
        edit_json(config, **{damage: "x"})
    with pytest.raises(ConfigError, match=re.escape(words)):
        LlamaGenPipeline.from_pretrained(str(folder))


@pytest.mark.reliability(area="loading: pipeline folders",
                         probe="a damaged model_index.json (not JSON, nested 10⁵ deep, an unknown _class_name) loaded "
                               "through arvis.hub.load_pipeline, as every command does; a sampling_defaults.json with "
                               "guidance_scale = -1, top_p = 2, top_k = \"5\", num_iter = 0 (MAR) or not JSON",
                         outcome="CheckpointError naming model_index.json (it was a plain ValueError); ConfigError naming "
                                 "sampling_defaults.json and the setting when the pipeline loads (it failed only at "
                                 "generate time, without naming the file)")
@pytest.mark.parametrize("damage, error, words", [
    ("index-not-json", CheckpointError, "model_index.json' is not valid JSON"),
    ("index-deep", CheckpointError, "model_index.json' is nested deeper than"),
    ("index-class", CheckpointError, "_class_name 'Bogus' is not a pipeline arvis provides"),
    ("guidance", ConfigError, "sampling_defaults.json: guidance_scale = -1 is not a finite number in"),
    ("top_p", ConfigError, "sampling_defaults.json: top_p = 2 is not a finite number in (0, 1]"),
    ("top_k", ConfigError, "sampling_defaults.json: top_k = '5' is not an integer"),
    ("not-json", ConfigError, "sampling_defaults.json' is not valid JSON"),
    ("mar-num_iter", ConfigError, "sampling_defaults.json: num_iter = 0 is not an integer in [1, 4096]"),
])
def test_damaged_index_and_defaults_are_named_at_load(pipeline_dir, tmp_path, damage, error, words):
    from arvis.hub import load_pipeline

    folder = variant(pipeline_dir, tmp_path)
    if damage.startswith("mar"):
        from tests.pipelines.test_mar import tiny_pipeline

        shutil.rmtree(folder)
        tiny_pipeline().save_pretrained(folder)
    index, defaults = folder / "model_index.json", folder / "sampling_defaults.json"
    if damage == "index-not-json":
        index.write_text("{not json")
    elif damage == "index-deep":
        index.write_text("[" * 10**5 + "]" * 10**5)
    elif damage == "index-class":
        edit_json(index, _class_name="Bogus")
    elif damage == "not-json":
        defaults.write_text("{")
    else:
        name = damage.split("-")[-1] if damage.startswith("mar") else damage
        value = {"guidance": -1, "top_p": 2, "top_k": "5", "num_iter": 0}[name]
        defaults.write_text(json.dumps({"guidance_scale" if name == "guidance" else name: value}))
    with pytest.raises(error, match=re.escape(words)):
        load_pipeline(str(folder))
