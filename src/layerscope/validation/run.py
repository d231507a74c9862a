"""``layerscope validate``: plant each kind of known answer at random places, run the studies that make each
verdict, score them against the planted truth, and write the validation card.

    result = validate(lm, instances=20, seed=42)          # lm: a LoadedModel (load_model("smollm2-135m"))
    result["card"]                                         # one row per verdict and check (see .card)
    result["rows"]                                         # one row per instance (the card's source)
    write_card(result, "runs/validate")                    # index.html, report.md, table.csv, result.json

What runs (each part's rows are its module's): the atlas's boundaries on the unplanted model, on inserted identity
bands (:data:`IDENTITY_PER_INSTANCE` x ``instances``; the planted profiles derived from the unplanted pass, one real
pass checking the derivation), on scaled writes (``scaled`` real passes), and on profiles with no change
(``nulls``); surgery on inserted bands (``surgery`` instances) and on removed bands; the estimators on synthetic
data of known dimension and similarity (:mod:`.estimators`). Every part is seeded from ``seed``; texts: a seeded
subset of ``n_texts`` of the bundled pair statements and prompts. The statistical verdicts (divergence, phases,
ablation, scaling, the probe's decodability) run their own analyses on null relabelings of their data
(:func:`null_rows`).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from ..data.texts import load_texts
from ..io import staged_dir
from ..models.load import LoadedModel
from ..progress import stage
from ..provenance import library_versions
from ..report.html import markdown_html, page
from ..study.manifests import model_entry
from . import boundaries, estimators, nulls, surgery
from .card import card_markdown, card_rows

DEFAULT_TEXTS = 48
"""Texts of each atlas pass: a seeded subset of the bundled statements and prompts (each scaled-writes instance
runs one pass over them)."""


IDENTITY_PER_INSTANCE = 5
"""Inserted identity bands per planted instance (no forward pass, 0.6 s each): 20 bands (40 ends) cannot tell a
coverage of 0.95 from one under 0.90 (on six seeds one card's 40 ends ranged over 0.15); 200 ends tell it within
about 0.04."""

NO_CHANGE_PER_INSTANCE = 10
"""Profiles with no change per planted instance: a false-alarm rate of 3 % is shown under 5 % with a Wilson upper
end under 10 % on 200 of them (half a second each, no forward pass), not on 100."""


def pick(n_texts: int, seed: int) -> tuple[list[str], str]:
    texts = load_texts()
    rng = np.random.default_rng(seed)
    index = np.sort(rng.choice(len(texts.texts), min(n_texts, len(texts.texts)), replace=False))
    return [texts.texts[i] for i in index], texts.hash


def texts_fit(lm: LoadedModel, max_length: int | None) -> None:
    """Before any work: every text the card runs fits the model's positions (the statements and prompts of the
    atlas passes as they are; the null relabelings' pairs and languages truncated to ``max_length`` when given),
    else the one error that names the text and the fix."""
    from ..data import load_pairs
    from ..data.languages import load_languages
    from ..engine.forward.guards import encode

    encode(lm, load_texts().texts)
    encode(lm, [*load_pairs().texts(), *(text for _, _, text in load_languages().texts())], max_length)


def validate(lm: LoadedModel, instances: int = 20, seed: int = 42, n_texts: int = DEFAULT_TEXTS,
             n_resamples: int = 100, scaled: int | None = None, nulls: int | None = None,
             surgery_instances: int | None = None, max_length: int | None = None) -> dict:
    """The validation card of ``lm`` (module docstring): {"card", "rows", "meta"}. ``scaled``, ``nulls`` and
    ``surgery_instances`` default to ``instances``, :data:`NO_CHANGE_PER_INSTANCE` x ``instances`` and
    ``instances // 3`` (at least 2);
    ``max_length`` truncates the null relabelings' study texts (for a model with few positions)."""
    started = time.perf_counter()
    texts_fit(lm, max_length)
    scaled = instances if scaled is None else scaled
    identity = IDENTITY_PER_INSTANCE * instances
    nulls = NO_CHANGE_PER_INSTANCE * instances if nulls is None else nulls
    surgery_instances = max(2, instances // 3) if surgery_instances is None else surgery_instances
    texts, texts_hash = pick(n_texts, seed)
    seconds: dict[str, float] = {}
    rows: list[dict] = []

    def part(name: str, make) -> None:
        start = time.perf_counter()
        with stage(f"validate: {name}"):
            made = make(np.random.default_rng([seed, len(seconds)]))
        rows.extend({"part": name, **r} for r in made)
        seconds[name] = round(time.perf_counter() - start, 1)

    base_start = time.perf_counter()
    with stage("validate: the unplanted model's atlas pass and boundaries"):
        base = boundaries.unplanted(lm, texts, n_resamples, seed)
    seconds["unplanted"] = round(time.perf_counter() - base_start, 1)
    n = lm.info.n_layers
    part("recurrence", lambda rng: boundaries.recurrence_rows(base))
    part("derived check", lambda rng: boundaries.derived_check_rows(lm, base, texts, int(rng.integers(2, n - 1)),
                                                                     int(rng.choice(boundaries.BAND_SIZES))))
    part("inserted identity", lambda rng: boundaries.identity_rows(base, rng, identity))
    part("no change", lambda rng: boundaries.null_rows(base, rng, nulls))
    part("scaled writes", lambda rng: boundaries.scaled_rows(lm, base, texts, rng, scaled))
    part("surgery", lambda rng: surgery.surgery_rows(lm, rng, surgery_instances, seed=seed))
    part("removed band", lambda rng: surgery.removed_rows(lm, texts[:12], rng, surgery_instances))
    part("nulls", lambda rng: null_rows(lm, instances, seed, max_length))
    part("estimators", lambda rng: [{"verdict": "estimators", "check": f"{r['check']} ({r.get('estimator', '')})",
                                     "metric": "estimate", "success": bool(r["holds"]), "value": r["estimate"],
                                     **{k: v for k, v in r.items() if k in ("n", "d", "true_dim", "manifold")}}
                                    for r in estimators.random_cka_rows(seed) + estimators.twonn_rows(seed)])
    card = card_rows(rows)
    meta = {"model": lm.info.name, "day": f"{datetime.now(UTC):%Y-%m-%d}", "model_entry": model_entry(lm.info),
            "instances": instances, "identity_instances": identity,
            "scaled_writes_instances": scaled, "no_change_instances": nulls, "surgery_instances": surgery_instances,
            "texts": f"{len(texts)} of the bundled statements and prompts (seeded)", "texts_hash": texts_hash,
            "n_resamples": n_resamples, "seed": seed, "seconds": {**seconds,
                                                                   "total": round(time.perf_counter() - started, 1)},
            "versions": library_versions()}
    return {"card": card, "rows": rows, "meta": meta}


NULL_BOOTSTRAP = 2000
"""Bootstrap resamples of the phases study under its null (its default is more; each instance reruns it)."""


DIVERGENCE_POINT_EXTRA = 10
"""Shuffles per planted instance beyond the 5 every divergence verdict gets, for the divergence point and the
significant layer alone (:func:`~.nulls.divergence_point_null`, 0.5 s each): their tests hold 5 %, and a rate near
it on 100 shuffles (6/100 on the card of 2026-12-02) cannot be told from one under it; 300 show 3 % with an upper
end under 10 %."""


def null_rows(lm: LoadedModel, instances: int, seed: int, max_length: int | None = None) -> list[dict]:
    """Each statistical verdict under its null relabeling (:mod:`.nulls`), as card rows: a verdict printed where
    nothing is there is a false alarm. Divergence, the scaling peak and ablation: 5 x ``instances`` relabelings
    (the divergence points and significant layers :data:`DIVERGENCE_POINT_EXTRA` x ``instances`` more);
    phases (``n_bootstrap`` :data:`NULL_BOOTSTRAP`) and the split-pairs scaling null: ``instances``; the probe's
    decodable verdicts: ``instances // 4`` coin flips (at least 2)."""
    common = {"seed": seed, **({"max_length": max_length} if max_length else {})}
    made = (nulls.divergence_null(lm, n_null=5 * instances, **common)
            + nulls.divergence_point_null(lm, n_null=DIVERGENCE_POINT_EXTRA * instances, first=5 * instances,
                                          **common)
            + nulls.phases_null(lm, n_null=instances, n_bootstrap=NULL_BOOTSTRAP, **common)
            + nulls.ablation_null(lm, n_null=5 * instances, **common)
            + nulls.scaling_null(lm, n_null=5 * instances, **common)
            + nulls.scaling_split_null(lm, n_null=instances, **common)
            + nulls.probe_null(lm, n_null=max(2, instances // 4), **common))
    return [{"verdict": f"{r['study']}: {r['verdict']}", "check": r["null"], "metric": "false_alarm",
             "success": not r["printed"], "value": r.get("value"), "instance": r["instance"],
             "status": r.get("status"), "label": None if r.get("label") is None else str(r["label"])}
            for r in made]


def rescore(folder: str | Path) -> dict:
    """A written card's result again from its recorded instance rows (``table.csv``) and meta (``result.json``),
    scored by the current card code, with no model run: what ``tools/validation_findings.py keep`` records."""
    folder = Path(folder)
    meta = json.loads((folder / "result.json").read_text())["meta"]
    table = pd.read_csv(folder / "table.csv", dtype=object)
    rows = []
    for record in table.to_dict("records"):
        row = {k: v for k, v in record.items() if isinstance(v, str)}
        row["success"] = str(record["success"]).lower() == "true"
        rows.append(row)
    return {"card": card_rows(rows), "rows": rows, "meta": meta}


def write_card(result: dict, out: str | Path, force: bool = False) -> Path:
    """The card's folder: ``index.html`` (the card as a page), ``report.md``, ``table.csv`` (the instance rows),
    ``card.csv`` (the card rows) and ``result.json`` (card, meta), written atomically."""
    out = Path(out)
    meta = result["meta"]
    shown = {k: v for k, v in meta.items() if k not in ("model_entry", "versions")}
    text = card_markdown(result["card"], shown)
    table = pd.DataFrame([{k: (json.dumps(v) if isinstance(v, list | dict) else v) for k, v in r.items()}
                          for r in result["rows"]])
    payload = json.dumps({"card": result["card"], "meta": meta}, indent=2, default=str) + "\n"
    with staged_dir(out, force=force, kind="run") as tmp:
        (tmp / "report.md").write_text(text)
        (tmp / "table.csv").write_text(table.to_csv(index=False))
        (tmp / "card.csv").write_text(pd.DataFrame(result["card"]).to_csv(index=False))
        (tmp / "result.json").write_text(payload)
        (tmp / "index.html").write_text(page(f"Validation card: {meta['model']}", markdown_html(text)))
    return out
