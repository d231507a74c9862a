"""Where a trained tuned lens lives, and what it is trained on when no corpus is given.

    folder = cached_lens_dir(lm, settings)           # $LAYERSCOPE_CACHE/lenses/<model>-<weights>-<settings>
    texts, words = default_corpus(lm, n_samples=64, seed=0)   # the bundled texts and the model's own samples
    lens = trained_lens(lm, steps=250, seed=0)       # the cached lens for these settings, trained once

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
from ..provenance import sha256_json
from .tuned_lens import TunedLens

SAMPLE_TOKENS = 48
"""New tokens per model-written text of the default corpus."""


def cached_lens_dir(lm: LoadedModel, settings: dict[str, Any]) -> Path:
    """The cache folder of ``lm``'s lens trained with ``settings`` (plain values, the corpus's hash among them)."""
    key = sha256_json(settings)[:12]
    return cache_root() / "lenses" / f"{safe_slug(lm.info.name)[-60:]}-{lm.info.weights_hash[:12]}-{key}"


@torch.inference_mode()
def model_samples(lm: LoadedModel, prompts: Sequence[str], seed: int, new_tokens: int = SAMPLE_TOKENS) -> list[str]:
    """One sampled continuation (temperature 1, the full distribution) of each prompt's first two tokens."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    out = []
    for prompt in steps(list(prompts), f"sample texts from {lm.info.name}", "text"):
        ids = lm.tokenizer(prompt, return_tensors="pt")["input_ids"][:, :2]
        for _ in range(new_tokens):
            logits = lm.model(input_ids=ids.to(input_device(lm.model)), use_cache=False).logits[0, -1].float()
            token = torch.multinomial(torch.softmax(logits.cpu(), -1), 1, generator=generator)
            ids = torch.cat([ids, token[None]], dim=1)
        out.append(lm.tokenizer.decode(ids[0], skip_special_tokens=True))
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
