"""Where a trained tuned lens lives, and what it is trained on when no corpus is given.

    folder = cached_lens_dir(lm, settings)           # $LAYERSCOPE_CACHE/lenses/<model>-<weights>-<settings>
    texts, words = default_corpus(lm, n_samples=64, seed=0)   # the bundled texts and the model's own samples
    lens = trained_lens(lm, steps=250, seed=0)       # the cached lens for these settings, trained once
    lens, folder, info = resolve_lens("auto", lm, train_missing=True)   # a folder or "auto": what --tuned-lens takes

A lens is cached under the model cache's ``lenses/`` folder, keyed by the model's weights hash and a hash of the
training settings and corpus, so a second use with the same settings costs nothing. Without a corpus the lens is
trained on the bundled texts (the pair statements and the prompts) and on ``n_samples`` texts the model writes
itself (seeded sampling from each bundled text's first tokens): the objective only needs the model's own next
token distribution, so its own text is a fitting corpus. The lens's ``record["corpus"]["description"]`` says
which corpus it saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..models.info import input_device
from ..models.load import LoadedModel
from ..paths import cache_root, safe_slug
from ..progress import steps
from ..provenance import sha256_file, sha256_json
from .tuned_lens import TunedLens
from .tuned_lens_io import LensError

SAMPLE_TOKENS = 48
"""New tokens per model-written text of the default corpus."""
DEFAULTS = {"steps": 250, "batch_size": 8, "seed": 0}
"""train-lens's default training settings: the lens ``auto`` names."""


def default_settings(steps: int = DEFAULTS["steps"], batch_size: int = DEFAULTS["batch_size"],
                     seed: int = DEFAULTS["seed"]) -> dict[str, Any]:
    """The training settings that key a lens trained on the default corpus in the cache."""
    return {"corpus": "default", "steps": steps, "batch_size": batch_size, "seed": seed}


def cached_lens_dir(lm: LoadedModel, settings: dict[str, Any]) -> Path:
    """The cache folder of ``lm``'s lens trained with ``settings`` (plain values, the corpus's hash among them)."""
    key = sha256_json(settings)[:12]
    return cache_root() / "lenses" / f"{safe_slug(lm.info.name)[-60:]}-{lm.info.weights_hash[:12]}-{key}"


@torch.inference_mode()
def model_samples(lm: LoadedModel, prompts: Sequence[str], seed: int, new_tokens: int = SAMPLE_TOKENS,
                  batch_size: int = 16) -> list[str]:
    """One sampled continuation (temperature 1, the full distribution) of each prompt's first two tokens.

    ``batch_size`` prompts at a time with the model's key-value cache, so a text costs ``new_tokens`` one-token
    steps; every prompt has two tokens, so no padding is needed. Prompts with fewer than two tokens are skipped."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    starts = [ids[:2] for ids in lm.tokenizer(list(prompts))["input_ids"] if len(ids) >= 2]
    device = input_device(lm.model)
    out: list[str] = []
    chunks = [starts[i : i + batch_size] for i in range(0, len(starts), batch_size)]
    for chunk in steps(chunks, f"sample texts from {lm.info.name}", "batch"):
        ids = torch.tensor(chunk)
        step_ids, past = ids, None
        for _ in range(new_tokens):
            output = lm.model(input_ids=step_ids.to(device), past_key_values=past, use_cache=True)
            past = output.past_key_values
            probs = torch.softmax(output.logits[:, -1].float().cpu(), dim=-1)
            step_ids = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            ids = torch.cat([ids, step_ids], dim=1)
        out += lm.tokenizer.batch_decode(ids, skip_special_tokens=True)
    return [text for text in out if text.strip()]


def default_corpus(lm: LoadedModel, n_samples: int = 64, seed: int = 0) -> tuple[list[str], str]:
    """(texts, description): the bundled texts, then ``n_samples`` texts the model writes (module docstring)."""
    from ..data.texts import load_texts

    bundled = list(load_texts(None).texts)
    step = max(1, len(bundled) // max(1, n_samples))
    samples = model_samples(lm, bundled[::step][:n_samples], seed) if n_samples else []
    words = (f"{len(bundled)} bundled texts (pair statements and prompts) and {len(samples)} texts sampled from "
             f"the model itself (seed {seed}, {SAMPLE_TOKENS} new tokens after two of a bundled text's)")
    return bundled + samples, words


def trained_lens(lm: LoadedModel, texts: Sequence[str] | None = None, corpus: str | None = None, *,
                 force: bool = False, out: Path | None = None, **train: Any) -> tuple[TunedLens, Path, bool]:
    """(lens, folder, trained_now): the lens of ``lm`` for these training settings from ``out`` or the cache, or
    trained now (on ``texts``, default :func:`default_corpus`) and saved there. ``train``: the options of
    :func:`~.tuned_lens_train.train_tuned_lens`; ``force``: train again even when the folder holds a lens."""
    from .tuned_lens_train import train_tuned_lens

    settings = {"corpus": sha256_json(list(texts)) if texts is not None else "default", **train}
    folder = Path(out) if out is not None else cached_lens_dir(lm, settings)
    if (folder / "config.json").is_file() and not force:  # written last: a finished lens
        return TunedLens.load(folder, lm), folder, False
    if texts is None:
        texts, corpus = default_corpus(lm, seed=train.get("seed", 0))
    lens = train_tuned_lens(lm, list(texts), corpus=corpus, **train)
    lens.save(folder)
    return lens, folder, True


def resolve_lens(spec: str | Path, lm: LoadedModel, *, train_missing: bool = False
                 ) -> tuple[TunedLens, Path, dict[str, Any]]:
    """``(lens, folder, info)`` for ``spec``: a lens folder, or ``"auto"`` (the lens cached for ``lm`` with
    train-lens's defaults, trained now when there is none and ``train_missing``, else a :class:`LensError` that
    says how to train it). ``info``: what a result records of the lens (folder, parameter file's hash, training
    settings, corpus, whether it was trained now)."""
    trained_now = False
    if str(spec) == "auto":
        folder = cached_lens_dir(lm, default_settings())
        if not (folder / "config.json").is_file():
            if not train_missing:
                raise LensError(f"no tuned lens of {lm.info.name} is cached with train-lens's defaults; train one "
                                f"with layerscope train-lens --model {lm.info.name}, or pass a lens folder")
            lens, folder, trained_now = trained_lens(lm, **DEFAULTS)
        else:
            lens = TunedLens.load(folder, lm)
    else:
        folder = Path(spec)
        lens = TunedLens.load(folder, lm)
    record = lens.record
    info = {"folder": str(folder), "params_sha256": sha256_file(folder / "params.pt"), "trained_now": trained_now,
            "weights_hash": record.get("weights_hash"),
            **{key: record.get(key) for key in ("steps", "batch_size", "seed", "optimizer")},
            "corpus": (record.get("corpus") or {}).get("description")}
    return lens, folder, info
