"""How much an Emu3 emoji model reads its caption.

Teacher-forced on every emoji of a split (unaugmented renders at the model's resolution), the negative
log-likelihood of the image tokens under the emoji's own name and under another emoji's name (a fixed
derangement). The difference, in nats per token, is what the caption tells the model. It is reported over every
image token and over each image's first drawing tokens — the first tokens that are not the background code,
where the drawing starts and only the caption can say which emoji it is: a model that draws an emoji from its
name must gain there.

    python eval/emu3_caption_binding.py --model emu3 --json docs/figures/emu3/caption_binding.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIRST_DRAWING_TOKENS = 16


@torch.no_grad()
def caption_binding(pipe: Any, images: np.ndarray, names: list[str], batch_size: int = 32, seed: int = 0
                    ) -> dict[str, Any]:
    """Per-token NLL under the true and a deranged caption, over all image tokens and the first drawing tokens."""
    from arvis.training.train_emu3 import SequenceBuilder, encode_codes, lm_loss

    model = pipe.transformer.float().eval()
    grid = pipe.config.default_height
    builder = SequenceBuilder(pipe.tokenizer, grid, pipe.config.default_width)
    codes = torch.from_numpy(encode_codes(model.model.vqmodel, images).astype(np.int64))
    n = len(names)
    shift = int(np.random.default_rng(seed).integers(1, n)) if n > 1 else 0
    other = [names[(i + shift) % n] for i in range(n)]  # a derangement: nobody keeps their own name
    nll = {}
    for key, captions in (("true", names), ("shuffled", other)):
        parts = [lm_loss(model.model.text_model, model.lm_head, builder.vocab, builder,
                         builder.batch(codes[i:i + batch_size], captions[i:i + batch_size]), per_token=True)
                 for i in range(0, n, batch_size)]
        nll[key] = torch.cat(parts)  # [n, h * w]
    flat = codes.reshape(n, -1)
    background = int(flat.flatten().mode().values)
    drawing = flat != background
    first = drawing & (drawing.long().cumsum(1) <= FIRST_DRAWING_TOKENS)
    out: dict[str, Any] = {"images": n, "background_code": background, "first_drawing_tokens": FIRST_DRAWING_TOKENS}
    for key in ("true", "shuffled"):
        out[f"nll_{key}"] = float(nll[key].mean())
        out[f"nll_{key}_first"] = float(nll[key][first].mean())
    out["gain"] = out["nll_shuffled"] - out["nll_true"]
    out["gain_first"] = out["nll_shuffled_first"] - out["nll_true_first"]
    out["own_name_more_likely"] = float((nll["true"].sum(1) < nll["shuffled"].sum(1)).double().mean())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="emu3", help="an Emu3 pipeline (alias or folder)")
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.data.emoji import build_emoji
    from arvis.eval.files import write_json_atomic
    from arvis.hub import load_pipeline

    pipe, _, ref = load_pipeline(args.model)
    side = pipe.config.default_height * pipe.transformer.model.vqmodel.vision_spatial_factor
    record: dict[str, Any] = {**ref.record(), "resolution": side, "splits": {}}
    for split in ("train", "heldout"):
        data = build_emoji(None, split, side, cache=True)
        record["splits"][split] = caption_binding(pipe, data.images, [str(c) for c in data.captions])
        print(split, json.dumps(record["splits"][split]))
    if args.json:
        write_json_atomic(Path(args.json), record)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
