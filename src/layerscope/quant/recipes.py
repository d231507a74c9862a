"""Named quantization recipes: which weights, how many bits, one scale per what.

    recipe = RECIPES["group128"]        # Recipe(name, scheme="group:128", targets="linear", bits=None, ...)
    recipe.bits or 4                    # None: the --bits option decides (4 by default)

Every recipe touches decoder layers only: the embeddings, the output head (``lm_head``) and the final norm
keep their weights. Rounding is symmetric round-to-nearest (:mod:`.fake`), the baseline the toolkits'
calibrated methods (GPTQ's error compensation, AWQ's activation-aware scales) are measured against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    name: str
    scheme: str
    """per-tensor, per-channel or group:N (:func:`~layerscope.quant.fake.fake_quantize`)."""
    targets: str
    """"linear" (linear-layer weights) or "all-weights" (every parameter named 'weight', norms included)."""
    bits: int | None
    """Fixed by the recipe, or None: the --bits option decides."""
    source: str
    """Where the recipe comes from."""


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("notebook", "per-tensor", "all-weights", None,
           "the ablation notebook (seed 004): one absmax scale per tensor for every parameter named 'weight' in a "
           "decoder layer, norm weights included"),
    Recipe("per-channel", "per-channel", "linear", None,
           "one scale per output channel of each linear weight, norms in full precision: the weight scheme "
           "recommended by Krishnamoorthi (2018, arXiv:1806.08342) and Nagel et al. (2021, arXiv:2106.08295)"),
    Recipe("group128", "group:128", "linear", None,
           "4-bit weights with one scale per 128 inputs of an output channel, embeddings, lm_head and norms in full "
           "precision: the deployment layout of GPTQ (Frantar et al. 2023, arXiv:2210.17323) and AWQ (Lin et "
           "al. 2024, arXiv:2306.00978), here with plain round-to-nearest (their RTN g128 baseline)"),
    Recipe("int8", "per-channel", "linear", 8,
           "8-bit weights with one scale per output channel (W8 of SmoothQuant, Xiao et al. 2023, "
           "arXiv:2211.10438; the vector-wise weight scales of LLM.int8(), Dettmers et al. 2022, arXiv:2208.07339)"),
)}
"""The recipes ``--recipe`` accepts, by name."""


def recipe_for(scheme: str, targets: str) -> str:
    """The name of the recipe with this scheme and these targets (bits aside), or "custom"."""
    return next((r.name for r in RECIPES.values() if (r.scheme, r.targets) == (scheme, targets) and r.bits is None),
                "custom")
