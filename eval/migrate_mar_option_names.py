#!/usr/bin/env python
"""One-off migration (issue 35): MAR's records were measured before two method options were renamed.

- ``cspd-exact``'s ``gamma`` is now ``window``;
- ``cspd``'s ``window`` is now ``verify_every``.

The measurements stay as they are; only the names change, everywhere a record or a page built from records
carries them: the spec labels (``cspd-exact:final_std=0.05,gamma=2``), the ``options`` and the method's ``extra``
figures of bench and FID records, the lossless task's ``gamma``, the Markdown tables ``arvis bench`` wrote
beside its records, the model cards, and record file names that hold an old label (FID records are named by
:func:`figures.fid_slug` of their spec). A second run changes nothing.

    python eval/migrate_mar_option_names.py              # docs/figures/mar* and the MAR model cards
    python eval/migrate_mar_option_names.py --dry-run    # say what would change

``docs/figures/mar.md`` is then rebuilt from the records: ``python eval/figures.py --suite mar --report-only``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figure_runner import fid_slug  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RENAMES = {"cspd-exact": {"gamma": "window"}, "cspd": {"window": "verify_every"}}
# a spec label inside any text: the method name, then its options up to a character no option holds
LABEL = re.compile(r"(?<![\w-])(cspd-exact|cspd):([\w.=,\-]+)")


def rename_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``method``'s old option names replaced, in the same order."""
    renames = RENAMES.get(method, {})
    return {renames.get(k, k): v for k, v in options.items()}


def rename_labels(text: str) -> str:
    """Every ``cspd-exact:…`` / ``cspd:…`` spec label in ``text`` with the new option names."""
    def one(match: re.Match) -> str:
        method, renames = match.group(1), RENAMES[match.group(1)]
        items = [item.partition("=") for item in match.group(2).split(",")]
        return f"{method}:" + ",".join(f"{renames.get(k, k)}{eq}{v}" for k, eq, v in items)

    return LABEL.sub(one, text)


def label(method: str, options: dict[str, Any]) -> str:
    """The spec label of ``method`` with ``options`` (as :class:`arvis.methods.spec.MethodSpec` writes it)."""
    return method + "".join(f"{':' if i == 0 else ','}{k}={json.dumps(v)}" for i, (k, v) in enumerate(options.items()))


def migrate_json(value: Any) -> Any:
    """A record with the new names (labels in every string; ``options`` / ``extra`` of a method's row)."""
    if isinstance(value, str):
        return rename_labels(value)
    if isinstance(value, list):
        return [migrate_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    method = value.get("method")
    out = {}
    for key, v in value.items():
        v = migrate_json(v)
        if key in ("options", "extra") and isinstance(v, dict) and method in RENAMES:
            v = rename_options(method, v)
        out[key] = v
    return out


def migrate(root: Path, cards: list[Path], dry_run: bool) -> list[str]:
    """Migrate the records under ``root / "mar"``, ``root / "mar.md"`` and ``cards``; what changed, in words."""
    changed = []
    for path in sorted((root / "mar").rglob("*.json")):
        record = json.loads(path.read_text())
        new = migrate_json(record)
        if path.name == "lossless.json" and "gamma" in new:  # the task's own field (cspd-exact's window)
            new = {("window" if k == "gamma" else k): v for k, v in new.items()}
        target = path
        if isinstance(record, dict) and record.get("method") in RENAMES and isinstance(record.get("options"), dict):
            method = record["method"]
            old_slug, new_slug = fid_slug(label(method, record["options"])), fid_slug(label(method, new["options"]))
            if old_slug != new_slug and path.name.startswith(old_slug):
                target = path.with_name(new_slug + path.name[len(old_slug):])
        if new != record or target != path:
            changed.append(_shown(path) + (f" -> {target.name}" if target != path else ""))
            if not dry_run:
                target.write_text(json.dumps(new, indent=2) + "\n")
                if target != path:
                    path.unlink()
    for path in [*sorted((root / "mar").rglob("*.md")), *cards]:
        text = path.read_text()
        new_text = rename_labels(text)
        if new_text != text:
            changed.append(_shown(path))
            if not dry_run:
                path.write_text(new_text)
    return changed


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=ROOT / "docs" / "figures")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    cards = sorted((ROOT / "arvis" / "weights").glob("mar*/README.md"))
    changed = migrate(args.root, cards, args.dry_run)
    for line in changed:
        print(("would change " if args.dry_run else "changed ") + line)
    print(f"{len(changed)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
