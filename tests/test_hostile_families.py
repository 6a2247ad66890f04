"""Hostile inputs to the families added after LlamaGen (VAR, MAR, video, Emu3) and to the evaluators' configs.

The same probes as tests/test_hostile_loaders.py, on the newer families: every configuration is checked
against its declared bounds before anything is allocated (under a +1 GiB address-space cap), unknown
keys are refused, and the official-layout loaders refuse with an :class:`~arvis.errors.ArvisError`.
Each test declares the docs/reliability.md row it proves (tests/reliability_rows.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from arvis.errors import CheckpointError, ConfigError
from arvis.models.var import VARTransformer, export_var_checkpoint, load_var_checkpoint
from arvis.pipelines import VARPipeline
from arvis.tokenizers.var_vq import VARVQModel
from tests.test_hostile_loaders import edit_json, run_capped


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    return copy


# ----------------------------------------------------------------------------- VAR
@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    from tests.test_var import tiny_pipeline

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
    from tests.test_var import tiny_var

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


def test_var_constructor_arguments_all_have_bounds():
    import inspect

    for cls in (VARTransformer, VARVQModel):
        params = set(inspect.signature(cls.__init__).parameters) - {"self"}
        assert set(cls.config_bounds) == params, cls.__name__


# ----------------------------------------------------------------------------- MAR
@pytest.fixture(scope="module")
def mar_dir(tmp_path_factory) -> Path:
    from tests.test_mar import tiny_pipeline

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
    from tests.test_mar import tiny_mar, tiny_vae

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
