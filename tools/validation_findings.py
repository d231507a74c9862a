"""Write what one recorded `layerscope validate` found into the pages and the package.

    .venv/bin/python tools/validation_findings.py keep runs/validate-<time>   # the card folder, with its times
    .venv/bin/python tools/validation_findings.py write                       # the pages again from what is kept
    .venv/bin/python tools/validation_findings.py check    # exit 1 when a page differs (tests/test_result_pages.py)

``keep`` scores the card folder's recorded instance rows (``table.csv``) again with the current card code (no model
runs) and writes ``result.json``, ``card.csv`` and ``report.txt`` (the card as markdown; not a page of the site)
into ``docs/results/validation/``, with
``made.json`` (the commit and day); a card of another model than :data:`PRIMARY` into
``docs/results/validation/<model>/``. ``write`` puts the card between ``<!-- validation-card:start -->``
and ``<!-- validation-card:end -->`` in docs/validation.md, and writes
``src/layerscope/data/bundled/validation_card.json`` (the card's rows, its model and day), which the studies read to
print each verdict's measured rates beside it (:mod:`layerscope.study.validated`). Nothing in them is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from pages import write_blocks

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "results" / "validation"
BUNDLED = ROOT / "src" / "layerscope" / "data" / "bundled" / "validation_card.json"


PRIMARY = "smollm2-135m"
"""The model whose card the studies print beside their verdicts; another model's card is kept in
``docs/results/validation/<model>/`` and shown beside it on the page (block ``validation-card-<model>``)."""


def kept_dir(model: str) -> Path:
    return KEPT if model == PRIMARY else KEPT / model


def keep(folder: Path) -> None:
    """The card of ``folder`` scored again from its instance rows by the current card code (no model runs), kept."""
    sys.path.insert(0, str(ROOT / "src"))
    import pandas as pd

    from layerscope.validation.card import card_markdown
    from layerscope.validation.run import rescore

    result = rescore(folder)
    dest = kept_dir(result["meta"]["model"])
    dest.mkdir(parents=True, exist_ok=True)
    shown = {k: v for k, v in result["meta"].items() if k not in ("model_entry", "versions")}
    (dest / "report.txt").write_text(card_markdown(result["card"], shown))
    pd.DataFrame(result["card"]).to_csv(dest / "card.csv", index=False)
    (dest / "result.json").write_text(json.dumps({"card": result["card"], "meta": result["meta"]}, indent=2,
                                                 default=str) + "\n")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    day = json.loads((folder / "result.json").read_text())["meta"].get("day")
    (dest / "made.json").write_text(json.dumps({"commit": commit.stdout.strip(), "day": day}, indent=2) + "\n")


def card_block(where: Path = KEPT) -> str:
    data = json.loads((where / "result.json").read_text())
    made = json.loads((where / "made.json").read_text())
    meta = data["meta"]
    report = (where / "report.txt").read_text()
    body = report.split("\n", 2)[2].strip()  # the report without its title line
    seconds = meta["seconds"]["total"]
    return (f"Recorded on {made['day']} (commit {made['commit']}) with `layerscope validate --model {meta['model']} "
            f"--instances {meta['instances']}` on this 2-core CPU: {round(seconds / 60)} min in all.\n\n{body}")


def bundled() -> str:
    data = json.loads((KEPT / "result.json").read_text())
    made = json.loads((KEPT / "made.json").read_text())
    keep_keys = ("verdict", "check", "metric", "n", "events", "rate", "ci_lo", "ci_hi", "target", "meets")
    card = [{k: c[k] for k in keep_keys} for c in data["card"]]
    return json.dumps({"model": data["meta"]["model"], "day": made["day"], "commit": made["commit"],
                       "card": card}, indent=1) + "\n"


def write(check: bool) -> list[str]:
    blocks = {"validation-card": card_block()}
    for made in sorted(KEPT.glob("*/made.json")):  # the cards of other models, beside the primary one
        blocks[f"validation-card-{made.parent.name}"] = card_block(made.parent)
    stale = write_blocks(ROOT, {"docs/validation.md": blocks}, check)
    text = bundled()
    if not BUNDLED.exists() or BUNDLED.read_text() != text:
        stale.append(str(BUNDLED.relative_to(ROOT)))
        if not check:
            BUNDLED.write_text(text)
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("keep").add_argument("folder", type=Path)
    sub.add_parser("write")
    sub.add_parser("check")
    args = parser.parse_args()
    if args.command == "keep":
        keep(args.folder)
        write(check=False)
    elif args.command == "write":
        write(check=False)
    else:
        stale = write(check=True)
        if stale:
            sys.exit("stale: " + ", ".join(stale) + "; run tools/validation_findings.py write")


if __name__ == "__main__":
    main()
