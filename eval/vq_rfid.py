"""rFID and PSNR of a VQ tokenizer: FID (domain network) of reconstructed held-out images.

    python eval/vq_rfid.py --vq arvis/weights/vq-photos --num 1000 --json docs/figures/vq_rfid.json
    python eval/vq_rfid.py --vq arvis/weights/var-vq-emoji --data emoji --num 1000 --json docs/figures/var/vq_rfid.json
    python eval/vq_rfid.py --data emoji --vq arvis/weights/vq-emoji --num 1000 --json docs/figures/emoji/vq_rfid.json

Reconstructions of ``num`` held-out images (seed 7; photos: crops disjoint from training pixels; emoji:
augmented views of held-out emoji) against the held-out reference statistics that every arvis FID of that
data set uses (the data set's domain network), beside the real-vs-real floor at the same size, and the
mean per-image PSNR of the reconstructions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vq", default="arvis/weights/vq-photos")
    p.add_argument("--data", choices=["photos", "emoji"], default="photos")
    p.add_argument("--num", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from arvis.eval.fid import compute_fid, reference_images_fn
    from arvis.tokenizers.llamagen_vq import LlamaGenVQModel
    from arvis.tokenizers.var_vq import VARVQModel
    from arvis.utils.images import mean_psnr

    kind = json.loads((Path(args.vq) / "config.json").read_text()).get("_class_name")
    cls = VARVQModel if kind == "VARVQModel" else LlamaGenVQModel  # VAR's multi-scale tokenizer, or LlamaGen's
    vq = cls.from_pretrained(args.vq, dtype=torch.float32).eval()
    images = reference_images_fn(args.data)(args.num, getattr(vq, "image_size", 128), 7)
    recon = []
    with torch.no_grad():
        for i in range(0, len(images), 32):
            x = torch.from_numpy(images[i:i + 32]).permute(0, 3, 1, 2).float() / 127.5 - 1
            y = vq.decode_codes(vq.encode(x))
            recon.append(((y + 1) * 127.5).round().clamp(0, 255).byte().permute(0, 2, 3, 1).numpy())
    recon = np.concatenate(recon)
    original = compute_fid(images, floor=True, data=args.data)
    rec = compute_fid(recon, floor=False, data=args.data)
    result = {"vq": args.vq, "data": args.data, "num": args.num, "rfid": rec.fid, "fid_of_the_originals": original.fid,
              "real_vs_real_floor": original.floor, "extractor": rec.generated.extractor,
              "psnr": mean_psnr(images, recon)}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
