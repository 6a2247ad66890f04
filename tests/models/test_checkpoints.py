"""Checkpoint I/O: official layouts, safe unpickling, clear errors, nothing half-written."""

from __future__ import annotations

import argparse
import os
import pickle
import zipfile

import pytest
import torch

from arvis.models.checkpoint import (
    export_llamagen_checkpoint,
    infer_llamagen_config,
    load_llamagen_checkpoint,
)
from arvis.models.llamagen import LlamaGenTransformer
from arvis.utils.serialization import load_pickle_checkpoint
from tests.conftest import tiny_llamagen


@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_export_official_layout_and_reload_bit_identical(tmp_path, model_type, suffix):
    model = tiny_llamagen(model_type)
    path = tmp_path / f"model{suffix}"
    export_llamagen_checkpoint(model, path, image_size=64, downsample_size=16)
    if suffix == ".pt":
        raw = torch.load(path, weights_only=False)  # test-only: inspect the layout we wrote
        assert set(raw) == {"model", "steps", "args"} and isinstance(raw["args"], argparse.Namespace)
        assert raw["args"].image_size == 64 and raw["args"].gpt_type == model_type
        reloaded = load_llamagen_checkpoint(path)
    else:
        reloaded = load_llamagen_checkpoint(path)  # the config travels in the safetensors header
    a, b = model.state_dict(), reloaded.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_infer_preset_from_shapes_on_meta():
    with torch.device("meta"):
        xl = LlamaGenTransformer.from_preset("GPT-XL", block_size=576)
        t2i = LlamaGenTransformer.from_preset("GPT-XL", model_type="t2i", cls_token_num=120, block_size=256)
    cfg = infer_llamagen_config(xl.state_dict(), block_size=576)
    assert (cfg["n_layer"], cfg["n_head"], cfg["dim"], cfg["num_classes"], cfg["model_type"]) == (36, 20, 1280, 1000, "c2i")
    cfg = infer_llamagen_config(t2i.state_dict(), args=argparse.Namespace(image_size=256, downsample_size=16))
    assert (cfg["model_type"], cfg["cls_token_num"], cfg["caption_dim"], cfg["block_size"]) == ("t2i", 120, 2048, 256)
    with pytest.raises(ValueError, match="block_size"):
        infer_llamagen_config(xl.state_dict())


def test_official_pickle_with_namespace_and_kv_cache_buffers_loads(tmp_path):
    """A checkpoint shaped like LlamaGen's: {"model", "optimizer", "steps", "args"}, KV-cache buffers included."""
    model = tiny_llamagen("c2i")
    sd = dict(model.state_dict())
    sd["layers.0.attention.kv_cache.k_cache"] = torch.zeros(2, 4, 24, 8)  # saved after setup_caches()
    args = argparse.Namespace(gpt_model="GPT-B", image_size=64, downsample_size=16,
                              arvis_config=dict(model.config))
    path = tmp_path / "official.pt"
    torch.save({"model": sd, "optimizer": {"state": {}, "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.95)}]},
                "steps": 1000, "args": args}, path)
    reloaded = load_llamagen_checkpoint(path)
    assert torch.equal(reloaded.output.weight, model.output.weight)


class _Exploit:
    """Unpickling this would create a sentinel file (stands in for arbitrary code execution)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_crafted_pickle_is_refused_and_never_runs(tmp_path):
    sentinel = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "payload": _Exploit(sentinel)}, path)
    with pytest.raises(ValueError, match="refused"):
        load_llamagen_checkpoint(path)
    with pytest.raises(ValueError, match="refused"):
        load_pickle_checkpoint(path)
    assert not sentinel.exists()
    # A bare pickle (not a torch zip) with the same payload is refused too.
    raw = tmp_path / "evil_raw.pth"
    raw.write_bytes(pickle.dumps({"model": _Exploit(sentinel)}))
    with pytest.raises(ValueError):
        load_llamagen_checkpoint(raw)
    assert not sentinel.exists()


def test_truncated_and_wrong_checkpoints_raise_clearly(tmp_path):
    model = tiny_llamagen("c2i")
    good = tmp_path / "good.pt"
    export_llamagen_checkpoint(model, good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ValueError, match="could not be read"):
        load_llamagen_checkpoint(truncated)
    bad_st = tmp_path / "truncated.safetensors"
    bad_st.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(ValueError, match="safetensors"):
        load_llamagen_checkpoint(bad_st)
    with pytest.raises(ValueError, match="no such file"):
        load_llamagen_checkpoint(tmp_path / "missing.pt")
    # Missing and unexpected keys are listed by name.
    sd = dict(model.state_dict())
    sd.pop("norm.weight")
    sd["extra.weight"] = torch.zeros(1)
    torch.save({"model": sd, "args": argparse.Namespace(arvis_config=dict(model.config))}, tmp_path / "keys.pt")
    with pytest.raises(ValueError, match=r"missing keys.*norm\.weight.*unexpected keys.*extra\.weight"):
        load_llamagen_checkpoint(tmp_path / "keys.pt")
    assert zipfile.is_zipfile(good)  # the good export is a regular torch zip checkpoint


def test_export_is_atomic(tmp_path, monkeypatch):
    """A failure while writing leaves neither a partial file nor a temporary one."""
    model = tiny_llamagen("c2i")
    target = tmp_path / "out.pt"

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        export_llamagen_checkpoint(model, target)
    assert list(tmp_path.iterdir()) == []
