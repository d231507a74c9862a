"""``layerscope extract``: activations and NLL for a pair dataset, plus a short summary."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..models import DEFAULT_MODEL, ZOO  # the zoo's names only: no torch until the command runs
from ..provenance import library_versions
from ..terminal import say
from .app import app, setup_logging, user_errors

if TYPE_CHECKING:
    from ..data import PairDataset
    from ..engine import Activations

MODEL_HELP = (f"Model: a zoo name ({', '.join(ZOO)}), a local folder, a .gguf file, "
              "or a Hugging Face hub id, optionally ID@REVISION.")


class Compat(StrEnum):
    notebooks = "notebooks"
    seed = "seed"  # notebooks' old name: accepted, with a note, until 0.5.0 (layerscope.modes)


class StoreDType(StrEnum):
    float32 = "float32"
    float16 = "float16"


class DType(StrEnum):
    auto = "auto"  # bfloat16 on CUDA, float32 on CPU (models.load.default_dtype)
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"


@app.command("extract")
@user_errors
def extract_command(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help=MODEL_HELP),
    dataset: Path = typer.Option(None, "--dataset", "-d", help="Statement-pair dataset: .json in the "
                                 "notebooks' format, .jsonl or .csv (category,a,b). Default: the bundled dataset."),
    out: Path = typer.Option(None, "--out", "-o", help="Folder to write activations.npz and manifest.json "
                             "into. Default: runs/extract-<UTC time>."),
    compat: Compat = typer.Option(None, "--compat", help="'notebooks' reproduces the research notebooks' "
                                  "numerics (token 0 always dropped from mean pooling; 'seed' is its deprecated "
                                  "old name). Default: the corrected method (a BOS token dropped by its id)."),
    batch_size: int = typer.Option(None, "--batch-size", min=1, help="Texts per forward pass. Default: planned "
                                   "from the device's memory (a token budget)."),
    store_dtype: StoreDType = typer.Option(StoreDType.float32, "--store-dtype", help="How the activation cache "
                                           "stores pooled vectors: float16 halves the disk."),
    max_length: int = typer.Option(None, "--max-length", help="Truncate every text to this many tokens (recorded "
                                   "in the manifest). Default: no truncation, and a text longer than the model's "
                                   "maximum positions is an error naming it."),
    dtype: DType = typer.Option(DType.auto, "--dtype", help="One dtype for every parameter. "
                                "Default: bfloat16 on CUDA, float32 on CPU."),
    device: str = typer.Option(None, "--device", help="cpu, cuda or cuda:N. Default: cuda if present, else cpu."),
    device_map: str = typer.Option(None, "--device-map", help="'auto' spreads a big model over all GPUs "
                                   "(replaces --device)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists and is not empty."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the activation cache "
                                  "($LAYERSCOPE_CACHE, default ~/.cache/layerscope)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details to stderr."),
) -> None:
    """Run every text of a pair dataset through a model once; save every layer's pooled
    vectors (mean, last, first) and each text's NLL, and print a per-category summary."""
    from ..data import load_pairs
    from ..engine import extract
    from ..io import atomic_write_json, check_out_dir, staged_dir
    from ..models import load_model

    setup_logging(verbose)
    started = time.perf_counter()
    inputs = [str(p) for p in (dataset, model) if p is not None and Path(p).exists()]  # never replaced by --out
    out = check_out_dir(out or Path("runs") / f"extract-{datetime.now(UTC):%Y%m%d-%H%M%S}", force, inputs)
    pairs = load_pairs(dataset)
    lm = load_model(model, dtype=dtype.value, device=device, device_map=device_map)
    loaded = time.perf_counter()
    acts = extract(lm, pairs.texts(), compat=compat.value if compat else None, batch_size=batch_size,
                   store_dtype=store_dtype.value,
                   max_length=max_length, cache=not no_cache)
    with staged_dir(out, force=force, kind="extract", inputs=inputs) as tmp:
        acts.save(tmp / "activations.npz")
        atomic_write_json(tmp / "manifest.json", manifest(acts, pairs, batch_size, load_s=loaded - started,
                                                          total_s=time.perf_counter() - started))
    say(summary(acts, pairs))
    say(f"\nwrote {out / 'activations.npz'} and {out / 'manifest.json'}")


def manifest(acts: Activations, pairs: PairDataset, batch_size: int | None, *, load_s: float, total_s: float) -> dict:
    stats = acts.stats
    return {
        "schema_version": 1,
        "command": "extract",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": acts.model.to_dict(),
        "dataset": {"source": pairs.source, "hash": pairs.hash, "n_pairs": pairs.n_pairs,
                    "categories": [c.name for c in pairs.categories]},
        "settings": acts.settings.to_dict(),
        "batch_size": batch_size,  # None: planned from memory; never changes a number beyond float rounding
        "fingerprint": acts.fingerprint,
        "versions": library_versions(),
        "timing": {"load_s": round(load_s, 3), "extract_s": round(stats.seconds, 3), "total_s": round(total_s, 3)},
        "cache": {"batches": stats.batches, "computed": stats.batches_computed, "reused": stats.batches_reused},
        "arrays": {f"pooled_{p}": list(v.shape) for p, v in acts.pooled.items()},
    }


def summary(acts: Activations, pairs: PairDataset) -> str:
    import numpy as np

    from ..report.markdown import bits

    info, stats = acts.model, acts.stats
    nll = bits(acts.nll_mean)  # activations.npz keeps nats; the summary speaks bits, as every page does
    nll_a, nll_b = nll[0::2], nll[1::2]
    cats = pairs.pair_categories()
    lines = [
        f"model    {info.name}: {info.architecture}, {info.n_layers} layers, d={info.hidden_size}, "
        f"{info.dtype} on {info.device}, adds BOS: {'yes' if info.adds_bos else 'no'}",
        f"dataset  {_label(pairs)}: {pairs.n_pairs} pairs in {len(pairs.categories)} categories",
        f"extract  {acts.n_texts} texts x {info.n_layers + 1} hidden states x {len(acts.pooled)} poolings "
        f"in {stats.seconds:.1f}s ({stats.batches} batches: {stats.batches_computed} computed, "
        f"{stats.batches_reused} from cache)",
        "",
        f"{'category':<24} {'NLL A':>7} {'NLL B':>7} {'B - A':>7} {'A preferred':>12}",
    ]
    for c, cat in enumerate(pairs.categories):
        a, b = nll_a[cats == c], nll_b[cats == c]
        lines.append(f"{cat.name:<24} {a.mean():7.3f} {b.mean():7.3f} {np.mean(b - a):+7.3f} "
                     f"{np.mean(b > a):11.0%}")
    lines.append(f"{'all pairs':<24} {nll_a.mean():7.3f} {nll_b.mean():7.3f} {np.mean(nll_b - nll_a):+7.3f} "
                 f"{np.mean(nll_b > nll_a):11.0%}")
    lines.append("(mean next-token NLL in bits per token; B - A > 0: the model prefers A)")
    return "\n".join(lines)


def _label(pairs: PairDataset) -> str:
    from ..data import bundled_pairs_path

    return "bundled pairs" if Path(pairs.source) == bundled_pairs_path() else pairs.source
