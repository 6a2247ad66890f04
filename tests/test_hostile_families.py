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
