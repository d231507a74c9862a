"""Where a trained tuned lens lives, and what it is trained on when no corpus is given.

    folder = cached_lens_dir(lm, settings)           # $LAYERSCOPE_CACHE/lenses/<model>-<weights>-<settings>
    texts, groups, words = default_corpus(lm, seed=0)   # the bundled texts and one model sample of each
    lens = trained_lens(lm, seed=0)                  # the cached lens for these settings, trained once
    lens, folder, info = resolve_lens("auto", lm, train_missing=True)   # a folder or "auto": what --tuned-lens takes

A lens is cached under the model cache's ``lenses/`` folder, keyed by the model's weights hash and a hash of the
training settings and corpus, so a second use with the same settings costs nothing. Without a corpus the lens is
trained on the bundled texts (the pair statements and the prompts) and on one text the model writes itself from
each (seeded sampling of ``SAMPLE_TOKENS`` tokens after the bundled text's first two): the objective only needs
the model's own next-token distribution, so its own text is a fitting corpus. Groups keep a pair's two
statements and every sample with the text it started from on one side of the held-out split. The lens's
``record["corpus"]["description"]`` says which corpus it saw.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ...models.info import input_device
from ...models.load import LoadedModel
from ...paths import cache_root, safe_slug
from ...progress import steps
from ...provenance import sha256_file, sha256_json
from .tuned import TunedLens
from .tuned_io import LensError

SAMPLE_TOKENS = 24
"""New tokens per model-written text of the default corpus."""
SAMPLES_PER_TEXT = 1
"""Model-written texts per bundled text in the default corpus."""
def default_settings(**train: Any) -> dict[str, Any]:
    """The settings that key a lens trained on the default corpus in the cache: the options of
    :func:`~.tuned_lens_train.train_tuned_lens` in ``train`` that differ from its defaults."""
    return {"corpus": "default-2", **changed(train)}


def changed(train: dict[str, Any]) -> dict[str, Any]:
    """The options in ``train`` that are set and differ from :func:`~.tuned_lens_train.train_tuned_lens`'s
    defaults (so an option spelled out at its default keys the same lens as one left out)."""
    from .tuned_train import DEFAULTS

    return {k: v for k, v in sorted(train.items()) if v is not None and not (k in DEFAULTS and DEFAULTS[k] == v)}


def cached_lens_dir(lm: LoadedModel, settings: dict[str, Any]) -> Path:
    """The cache folder of ``lm``'s lens trained with ``settings`` (plain values, the corpus's hash among them)."""
    key = sha256_json(settings)[:12]
    return cache_root() / "lenses" / f"{safe_slug(lm.info.name)[-60:]}-{lm.info.weights_hash[:12]}-{key}"


@torch.inference_mode()
def model_samples(lm: LoadedModel, prompts: Sequence[str], seed: int, new_tokens: int = SAMPLE_TOKENS,
                  batch_size: int = 128, keep_empty: bool = False) -> list:
    """One sampled continuation (temperature 1, the full distribution) of each prompt's first two tokens.

    ``batch_size`` prompts at a time with the model's key-value cache, so a text costs ``new_tokens`` one-token
    steps; every prompt has two tokens, so no padding is needed. Prompts with fewer than two tokens are skipped.
    ``keep_empty``: return ``(prompt index, text)`` pairs, blank samples included."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    encoded = lm.tokenizer(list(prompts))["input_ids"]
    sources = [i for i, ids in enumerate(encoded) if len(ids) >= 2]
    starts = [encoded[i][:2] for i in sources]
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
    if keep_empty:
        return list(zip(sources, out, strict=True))
    return [text for text in out if text.strip()]


def default_corpus(lm: LoadedModel, seed: int = 0, per_text: int = SAMPLES_PER_TEXT,
                   new_tokens: int = SAMPLE_TOKENS) -> tuple[list[str], list[int], str]:
    """(texts, groups, description): the bundled texts, then ``per_text`` texts the model writes from each
    (module docstring); ``groups[i]``: text i's group (a pair's statements share one, a sample its source's)."""
    from ...data.pairs import load_pairs
    from ...data.texts import load_texts

    bundled = list(load_texts(None).texts)
    n_pair_texts = len(load_pairs().texts())  # the statements come first, pair i at 2i and 2i + 1
    groups = [i // 2 if i < n_pair_texts else i for i in range(len(bundled))]
    texts = list(bundled)
    for r in range(per_text):
        for source, sample in model_samples(lm, bundled, seed + r, new_tokens, keep_empty=True):
            if sample.strip():
                texts.append(sample)
                groups.append(groups[source])
    n_samples = len(texts) - len(bundled)
    words = (f"{len(bundled)} bundled texts (pair statements and prompts) and {n_samples} texts sampled from "
             f"the model itself (seeds {seed}..{seed + per_text - 1}, {new_tokens} new tokens after the first two "
             "of each bundled text; a pair's statements and each sample's source kept on one side of the split)")
    return texts, groups, words


def lens_folder(lm: LoadedModel, texts: Sequence[str] | None = None, out: Path | None = None,
                **train: Any) -> Path:
    """Where :func:`trained_lens` keeps ``lm``'s lens for these texts and options: ``out``, or the cache."""
    if out is not None:
        return Path(out)
    settings = (default_settings(**train) if texts is None else {"corpus": sha256_json(list(texts)),
                                                                  **changed(train)})
    return cached_lens_dir(lm, settings)


def trained_lens(lm: LoadedModel, texts: Sequence[str] | None = None, corpus: str | None = None, *,
                 force: bool = False, out: Path | None = None, started: float | None = None,
                 **train: Any) -> tuple[TunedLens, Path, bool]:
    """(lens, folder, trained_now): the lens of ``lm`` for these training settings from ``out`` or the cache, or
    trained now (on ``texts``, default :func:`default_corpus`) and saved there. ``train``: the options of
    :func:`~.tuned_lens_train.train_tuned_lens` (None: its default); ``force``: train again even when the folder
    holds a lens; ``started``: the ``time.perf_counter()`` the caller's work began at (the command's start), so
    the record's ``seconds["wall"]`` holds the time from it to the trained lens (model load included)."""
    from .tuned_train import train_tuned_lens

    folder = lens_folder(lm, texts, out, **train)
    if (folder / "config.json").is_file() and not force:  # written last: a finished lens
        return TunedLens.load(folder, lm), folder, False
    groups = None
    began = time.perf_counter()
    if texts is None:
        texts, groups, corpus = default_corpus(lm, seed=train.get("seed") or 0)
    sampled = time.perf_counter() - began
    lens = train_tuned_lens(lm, list(texts), groups=groups, corpus=corpus,
                            **{k: v for k, v in train.items() if v is not None})
    lens.record["seconds"] = {"corpus": sampled, **lens.record.get("seconds", {})}
    if started is not None:
        lens.record["seconds"]["wall"] = time.perf_counter() - started
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
            lens, folder, trained_now = trained_lens(lm)
        else:
            lens = TunedLens.load(folder, lm)
    else:
        folder = Path(spec)
        lens = TunedLens.load(folder, lm)
    record = lens.record
    info = {"folder": str(folder), "params_sha256": sha256_file(folder / "params.pt"), "trained_now": trained_now,
            "weights_hash": record.get("weights_hash"),
            **{key: record.get(key) for key in ("steps", "tokens_per_step", "batch_size", "init", "seed",
                                                "optimizer")},
            "corpus": (record.get("corpus") or {}).get("description")}
    return lens, folder, info
