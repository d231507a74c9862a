"""Time the ablation: prefix reuse against whole passes, and layerscope's loop against the notebook's reloads.

    .venv/bin/python benchmarks/ablation_vs_reload.py [--model smollm2-135m] [--bits 4] [--part prefix|reload|all]

Part "prefix" (issue 16): a whole ``layerscope run ablation --model M --sweep`` with prefix reuse (the default)
and with ``--no-prefix-reuse``, each in its own process, on the bundled texts; prints both times, their ratio
(target >= 1.4x), the largest relative difference of any text's perplexity (target <= 1e-5), and the bound prefix
reuse can reach: the compute of every pass whole over that of the planned passes, counting a decoder layer's cost
as its linear weights' multiply-adds per token and the unembedding's as vocab x hidden (the embedding lookup, norms
and attention scores left out), for this model and for a 7B-shaped one (Llama-2-7B: 32 layers, hidden 4096, MLP
11008, vocab 32000).

Part "reload": the notebook's 8 standard configurations with its quantization (per-tensor, every weight of the
chosen layers), in one process:
  notebook    per configuration: from_pretrained from the model's folder, quantize, then
              one forward pass per text (outputs.loss, truncation at 256 tokens)
  layerscope  one load; each configuration's layers snapshotted, quantized and restored; the baseline
              scored once; texts scored in length-sorted batches; prefix reuse
Prints both times, their ratio and the largest relative perplexity difference.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from layerscope import load_model
from layerscope.data.languages import load_languages
from layerscope.engine.interventions.prefix_plan import plan_passes
from layerscope.models import decoder_layers
from layerscope.studies.ablation.configs import standard_configs, sweep_configs
from layerscope.studies.ablation.runner import Variant, passes, score_configs, signatures_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from notebook_reference import ablation_perplexities  # noqa: E402  (the tests' independent reference)

DEFAULT_VARIANTS = [Variant("per-channel/linear", "per-channel", "linear", sweep=True),
                    Variant("per-tensor/all-weights (notebook)", "per-tensor", "all-weights", sweep=False)]
"""What ``layerscope run ablation --sweep`` scores by default."""


def bound(n_layers: int, layer_macs: float, head_macs: float) -> float:
    """Compute of every pass whole / compute of the prefix-reuse plan, for the default --sweep run."""
    configs = standard_configs(n_layers) | sweep_configs(n_layers)
    signatures = signatures_of(passes(configs, DEFAULT_VARIANTS), DEFAULT_VARIANTS, n_layers)
    costs = [layer_macs] * n_layers
    return (plan_passes(signatures, reuse=False).cost(costs, head_macs)
            / plan_passes(signatures).cost(costs, head_macs))


def run_cli(model: str, out: Path, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from layerscope.cli import main; main()", "run", "ablation", "--model",
                    model, "--sweep", "--out", str(out), *extra], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def prefix_part(model: str, keep: str | None) -> None:
    lm = load_model(model)
    blocks = decoder_layers(lm.model)
    n = len(blocks)
    layer_macs = sum(p.numel() for p in blocks[0].parameters() if p.dim() == 2)
    head_macs = lm.info.vocab_size * lm.model.config.get_text_config().hidden_size
    ours = bound(n, layer_macs, head_macs)
    seven_b = bound(32, 4 * 4096**2 + 3 * 4096 * 11008, 32000 * 4096)
    del lm
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(keep or tmp)
        t_off = run_cli(model, folder / "off", "--no-prefix-reuse")
        t_on = run_cli(model, folder / "on")
        tables = [pd.read_csv(folder / name / "table.csv") for name in ("off", "on")]
    keys = ["config", "scheme", "targets", "lang", "sample"]
    ppl = [t[t["metric"] == "ppl"].set_index(keys)["value"].sort_index() for t in tables]
    assert ppl[0].index.equals(ppl[1].index), "the two runs scored different texts or configurations"
    diff = float(np.max(np.abs(ppl[1].to_numpy() - ppl[0].to_numpy()) / ppl[0].to_numpy()))
    print(f"layerscope run ablation --model {model} --sweep ({len(ppl[0])} (configuration, text) perplexities, "
          f"{torch.get_num_threads()} threads)")
    print(f"  --no-prefix-reuse : {t_off:8.1f} s")
    print(f"  prefix reuse      : {t_on:8.1f} s")
    print(f"  whole / reuse = {t_off / t_on:5.2f}x   (target >= 1.4x; compute bound {ours:.2f}x for this model, "
          f"{seven_b:.2f}x for a 7B-shaped one)")
    print(f"  largest relative perplexity difference: {diff:.2e}   (target <= 1e-5)")


def reload_part(model: str, bits: int) -> None:
    lm = load_model(model)
    languages = load_languages()
    texts = [t for _, _, t in languages.texts()]
    configs = standard_configs(len(decoder_layers(lm.model)))
    print(f"model {lm.info.name}: {len(configs)} configurations x {len(texts)} texts, "
          f"{sum(len(lm.tokenizer(t)['input_ids']) for t in texts)} tokens, {torch.get_num_threads()} threads")

    start = time.perf_counter()
    ours = score_configs(lm, languages, configs, [Variant("notebook", "per-tensor", "all-weights", False, bits)],
                         batch_size=16, max_length=256).per_text
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    reference = ablation_perplexities(lm.info.source, lm.tokenizer, texts, configs, bits)
    t_ref = time.perf_counter() - start

    index = {(lang, sample): k for k, (lang, sample, _) in enumerate(languages.texts())}
    diffs = [abs(r.ppl - reference[(r.config, index[(r.lang, r.sample)])])
             / reference[(r.config, index[(r.lang, r.sample)])]
             for r in ours.itertuples()]
    print(f"notebook reload loop : {t_ref:8.2f} s")
    print(f"layerscope           : {t_ours:8.2f} s")
    print(f"notebook / layerscope = {t_ref / t_ours:5.2f}x")
    print(f"largest relative perplexity difference: {max(diffs):.2e} over {len(diffs)} (config, text) pairs; "
          f"median ppl all_quantized / baseline = "
          f"{np.median([reference[('all_quantized', k)] / reference[('baseline', k)] for k in range(len(texts))]):.3g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--part", choices=("prefix", "reload", "all"), default="all")
    parser.add_argument("--keep", help="folder to keep the two runs' output folders in (default: deleted)")
    args = parser.parse_args()
    if args.part in ("prefix", "all"):
        prefix_part(args.model, args.keep)
    if args.part in ("reload", "all"):
        reload_part(args.model, args.bits)


if __name__ == "__main__":
    main()
