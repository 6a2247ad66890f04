"""The FID Inception-v3 from a weights file the user supplies (nothing is downloaded).

FID in papers (LlamaGen, VAR, MAR through ADM's evaluation suite; pytorch-fid; clean-fid) is measured in the
2048-d pool features of one network: the TensorFlow Inception graph of 2015-12-05. arvis reads two
conversions of it:

- **pytorch-fid's state dict** ``pt_inception-2015-12-05-6726825d.pth`` (or a safetensors copy of it), read
  with ``torch.load(weights_only=True)`` (no arbitrary unpickling) or safetensors into
  :class:`FIDInceptionV3`: torchvision's ``Inception3`` (1008 classes, no auxiliary head) whose mixed blocks
  pool as the TF graph does (average pools that exclude the padding; the last block max-pools). Input
  ``[B, 3, 299, 299]`` in ``[0, 255]`` is scaled to ``[-1, 1]`` as pytorch-fid does (``2 x / 255 - 1``).
- **clean-fid's TorchScript** ``inception-2015-12-05.pt`` (NVIDIA's conversion): :class:`InceptionFeatures`,
  normalised as ``(x - 128) / 128`` like clean-fid. TorchScript runs in its own interpreter; load only files
  you trust.

torchvision's ImageNet classifier (``inception_v3_google-*.pth``, 1000 classes) is another network and is
refused: its FID is not the one papers report.

Images are resized to 299 by :mod:`arvis.eval.fid` before the network sees them (the FID resize mode:
``clean`` bicubic or ``bilinear`` as pytorch-fid and clean-fid's legacy modes), never inside it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from arvis.errors import CheckpointError

INCEPTION_SIZE = 299
INCEPTION_FEATURES = 2048
# What a user can supply; every "Inception weights needed" message names these.
INCEPTION_FILES = ("pytorch-fid's pt_inception-2015-12-05-6726825d.pth (a state dict, read with "
                   "torch.load(weights_only=True)) or a .safetensors copy of it, or clean-fid's "
                   "inception-2015-12-05.pt (TorchScript)")
STATE_DICT_SUFFIXES = (".pth", ".bin", ".ckpt", ".safetensors")


def missing_weights_message(what: str) -> str:
    """The sentence every refusal for want of Inception weights ends with."""
    return (f"{what} needs the FID Inception weights, which arvis cannot download: pass --extractor "
            f"inception:PATH with {INCEPTION_FILES}, fetched once where network access exists")


def _pool(x: torch.Tensor) -> torch.Tensor:
    # The TF graph's average pools ignore the zero padding at the borders (torchvision's count it).
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)


def _blocks():
    from torchvision.models import inception as tv

    class BlockA(tv.InceptionA):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b5 = self.branch5x5_2(self.branch5x5_1(x))
            b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
            return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(_pool(x))], 1)

    class BlockC(tv.InceptionC):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
            d = x
            for conv in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4,
                         self.branch7x7dbl_5):
                d = conv(d)
            return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(_pool(x))], 1)

    class BlockE(tv.InceptionE):
        def __init__(self, in_channels: int, max_pool: bool):
            super().__init__(in_channels)
            self.max_pool = max_pool  # the graph's last block max-pools its pool branch

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b3 = self.branch3x3_1(x)
            b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
            d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
            d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
            pooled = F.max_pool2d(x, kernel_size=3, stride=1, padding=1) if self.max_pool else _pool(x)
            return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(pooled)], 1)

    return tv, BlockA, BlockC, BlockE


class FIDInceptionV3(torch.nn.Module):
    """The FID Inception-v3 (pytorch-fid's layout and state-dict names): ``[B, 3, 299, 299]`` → ``[B, 2048]``.

    Built with random (uninitialised) weights; :func:`load_fid_inception` fills them from a file.
    """

    def __init__(self) -> None:
        super().__init__()
        tv, A, C, E = _blocks()
        net = tv.Inception3(num_classes=1008, aux_logits=False, transform_input=False, init_weights=False)
        for name, block in (("Mixed_5b", A(192, pool_features=32)), ("Mixed_5c", A(256, pool_features=64)),
                            ("Mixed_5d", A(288, pool_features=64)), ("Mixed_6b", C(768, channels_7x7=128)),
                            ("Mixed_6c", C(768, channels_7x7=160)), ("Mixed_6d", C(768, channels_7x7=160)),
                            ("Mixed_6e", C(768, channels_7x7=192)), ("Mixed_7b", E(1280, max_pool=False)),
                            ("Mixed_7c", E(2048, max_pool=True))):
            setattr(net, name, block)
        self.net = net

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        n = self.net
        x = images / 127.5 - 1.0  # pytorch-fid: 2 * (x / 255) - 1
        for layer in (n.Conv2d_1a_3x3, n.Conv2d_2a_3x3, n.Conv2d_2b_3x3, n.maxpool1, n.Conv2d_3b_1x1,
                      n.Conv2d_4a_3x3, n.maxpool2, n.Mixed_5b, n.Mixed_5c, n.Mixed_5d, n.Mixed_6a, n.Mixed_6b,
                      n.Mixed_6c, n.Mixed_6d, n.Mixed_6e, n.Mixed_7a, n.Mixed_7b, n.Mixed_7c):
            x = layer(x)
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def load_fid_inception(path: str | os.PathLike) -> FIDInceptionV3:
    """:class:`FIDInceptionV3` with the weights of ``path`` (a state dict: ``.pth`` read with
    ``weights_only=True``, or ``.safetensors``).

    Raises:
        CheckpointError: missing or unreadable file, a pickle asking for objects outside the allowlist,
            torchvision's ImageNet classifier, or tensors that do not fit the network (names the keys).
    """
    from arvis.utils.serialization import (
        check_state_dict,
        check_tensor_values,
        extract_state_dict,
        load_state_dict_file,
    )

    source = f"Inception weights {str(path)!r}"
    state, _ = extract_state_dict(load_state_dict_file(path), source=source)
    # BatchNorm's step counters (integers; present or not depending on the torch that saved the file) play no
    # part in evaluation.
    state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    fc = state.get("fc.weight")
    if any(k.startswith("AuxLogits.") for k in state) or (isinstance(fc, torch.Tensor) and fc.shape[0] == 1000):
        raise CheckpointError(f"{source} is torchvision's ImageNet classifier, not the FID Inception (the "
                              f"2015-12-05 TensorFlow graph); its FID is not comparable with papers. Use "
                              f"{INCEPTION_FILES}")
    check_tensor_values(state, source)
    model = FIDInceptionV3()
    check_state_dict(model.net, state, source, ignore_substrings=("num_batches_tracked",))
    model.net.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.eval()


class InceptionFeatures(torch.nn.Module):
    """The FID Inception as a feature extractor (``input_size`` 299, 2048-d), from either file kind.

    Args:
        path: pytorch-fid's state dict (``.pth`` / ``.safetensors``) or clean-fid's TorchScript ``.pt``.

    The fingerprint is the file's sha256 (cached statistics name the weights they were computed with).
    """

    input_size = INCEPTION_SIZE

    def __init__(self, path: str | os.PathLike):
        super().__init__()
        path = Path(path).expanduser()
        if not path.is_file():
            raise ValueError(f"extractor: Inception weights file {str(path)!r} not found; "
                             + missing_weights_message("this extractor"))
        self.path = path
        self.name = "inception"
        self._fingerprint: str | None = None
        self.base: torch.nn.Module | None = None
        self.layers: torch.nn.Module
        if path.suffix in STATE_DICT_SUFFIXES:
            self.layers = load_fid_inception(path)
            self.kind = "pytorch-fid"
        else:
            self.base = _load_torchscript(path)
            self.layers = self.base.layers
            self.kind = "clean-fid"

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.shape[2:] != (INCEPTION_SIZE, INCEPTION_SIZE):
            raise ValueError(f"Inception expects {INCEPTION_SIZE}x{INCEPTION_SIZE} inputs, got {tuple(images.shape[2:])}")
        if self.base is None:
            return self.layers(images)
        return self.layers.forward((images - 128) / 128).reshape(images.shape[0], -1)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from arvis.eval.files import sha256_file

            self._fingerprint = sha256_file(self.path)
        return self._fingerprint


def _load_torchscript(path: Path) -> torch.nn.Module:
    try:
        with warnings.catch_warnings():  # torch >= 2.10 flags TorchScript as deprecated; clean-fid uses it
            warnings.simplefilter("ignore", FutureWarning)
            base = torch.jit.load(str(path), map_location="cpu").eval()
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"extractor: {str(path)!r} is not a TorchScript Inception file ({err}); expected "
                         f"{INCEPTION_FILES}") from None
    if not hasattr(base, "layers"):
        raise ValueError(f"extractor: {str(path)!r} has no 'layers' module; expected clean-fid's "
                         f"inception-2015-12-05.pt")
    return base
