"""The surgery study's verdicts tested where the answer is known: blocks that write nothing are never needed, the
pruning rules take them first, and a removed band costs what surgery says that set costs.

    rows = surgery_rows(lm, rng, instances=6, max_texts=12, seed=42)     # inserted bands, the study at its defaults
    rows += removed_rows(lm, texts, rng, instances=5)                    # removed bands against surgery's prune

Rows as in :mod:`.boundaries` (``check``, ``verdict``, ``metric``, ``success``, ``value`` and the plant's
parameters). An inserted block that writes nothing costs exactly 0 when skipped, so the study calling it needed
is a false alarm (``false_alarm``), its skip-cost interval must hold 0 (``interval_holds_zero``), ShortGPT's
lowest block influence and Gromov et al.'s closest block must pick inside the band (``first_picks``), and a
removed band's NLL change must equal surgery's ``prune`` of the same blocks (``set_cost``: the largest per-text
difference, nats).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine.interventions.surgery import Intervention
from ..engine.interventions.surgery_run import measure_interventions
from ..engine.interventions.transitions import block_transitions
from ..measures.pruning import closest_block, lowest_influence
from ..models.load import LoadedModel
from ..plant import inserted_identity, removed_band
from ..studies.surgery import Surgery, pick_texts
from ..study.config import StudyConfig

VERDICT = "surgery"


def surgery_rows(lm: LoadedModel, rng: np.random.Generator, instances: int, max_texts: int = 12, seed: int = 42,
                 n_bootstrap: int = 1000, n_permutations: int = 1000) -> list[dict]:
    """Per instance a band of 4 to 8 blocks that write nothing at a random place; the surgery study (skips only,
    its texts and tests) on the planted copy, and the pruning rules on its geometry."""
    n = lm.info.n_layers
    rows = []
    for i in range(instances):
        k = int(rng.integers(4, 9))
        at = int(rng.integers(1, n))
        planted = inserted_identity(lm, at, k)
        config = StudyConfig(study="surgery", models=(planted,), interventions="skip", max_texts=max_texts,
                             seed=seed, n_bootstrap=n_bootstrap, n_permutations=n_permutations)
        result = Surgery().run(config)
        s = result.summary["models"][planted.info.name]
        band = set(range(at, at + k))
        critical = set(s["critical"]["layers"])
        table = result.table
        skip = table[(table["intervention"] == "skip") & (table["metric"] == "delta_nll")]
        if "lang" in skip:
            skip = skip[skip["lang"].isna() | (skip["lang"] == "all")]
        extra = {"instance": i, "plant": "inserted_identity", "at": at, "k": k}
        for b in sorted(band):
            row = skip[skip["layer"] == b].iloc[0]
            rows += [{"check": "inserted blocks are never needed", "verdict": VERDICT, "metric": "false_alarm",
                      "success": b not in critical, "value": float(row["value"]), "block": b, **extra},
                     {"check": "inserted blocks' skip-cost interval holds 0", "verdict": VERDICT,
                      "metric": "interval_holds_zero", "success": bool(row["ci_lo"] <= 0 <= row["ci_hi"]),
                      "value": f"{row['ci_lo']:.3g}..{row['ci_hi']:.3g}", "block": b, **extra}]
        texts, _, _ = pick_texts(config)
        t = block_transitions(planted, texts)
        for rule, picks in (("lowest block influence (ShortGPT)", lowest_influence(t.influence, k)),
                            ("closest block (Gromov et al.)", closest_block(t.angular, k))):
            rows.append({"check": f"{rule} picks the inserted blocks first", "verdict": "pruning",
                         "metric": "first_picks", "success": set(picks) <= band, "value": list(picks), **extra})
    return rows


def removed_rows(lm: LoadedModel, texts: Sequence[str], rng: np.random.Generator, instances: int) -> list[dict]:
    """Per instance a random band of 1 to 4 blocks removed: the planted copy's NLL change against surgery's
    ``prune`` of the same blocks on the intact model, text by text."""
    n = lm.info.n_layers
    rows = []
    for i in range(instances):
        k = int(rng.integers(1, 5))
        start = int(rng.integers(0, n - k + 1))
        band = tuple(range(start, start + k))
        m = measure_interventions(lm, texts, [Intervention.prune(band)], progress=False)
        removed = measure_interventions(removed_band(lm, start, k), texts, [Intervention.skip(0)], progress=False)
        diff = float(np.max(np.abs(removed.intact_nll - m[Intervention.prune(band)].nll)))
        rows.append({"check": "a removed band costs what surgery's prune of it costs", "verdict": VERDICT,
                     "metric": "set_cost", "success": diff < 1e-4, "value": diff, "instance": i,
                     "plant": "removed_band", "at": start, "k": k,
                     "cost": float(np.mean(m[Intervention.prune(band)].nll - m.intact_nll))})
    return rows
