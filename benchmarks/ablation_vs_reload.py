"""Time layerscope's ablation loop against the notebook's reload-per-configuration loop.

    .venv/bin/python benchmarks/ablation_vs_reload.py [--model smollm2-135m] [--bits 4]

Both run the notebook's 8 standard configurations with its quantization (per-tensor,
every weight of the chosen layers) on the bundled texts, in one process:
  notebook    per configuration: from_pretrained from the model's folder, quantize, then
              one forward pass per text (outputs.loss, truncation at 256 tokens)
  layerscope  one load; weights snapshotted once and restored between configurations;
              the baseline scored once; texts scored in length-sorted batches
Prints both times, the ratio (target >= 4x) and the largest relative perplexity difference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from layerscope import load_model
from layerscope.data.languages import load_languages
from layerscope.models import decoder_layers
from layerscope.studies.ablation.configs import standard_configs
from layerscope.studies.ablation.runner import Variant, score_configs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from notebook_reference import ablation_perplexities  # noqa: E402  (the tests' independent reference)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--bits", type=int, default=4)
    args = parser.parse_args()
    lm = load_model(args.model)
    languages = load_languages()
    texts = [t for _, _, t in languages.texts()]
    configs = standard_configs(len(decoder_layers(lm.model)))
    print(f"model {lm.info.name}: {len(configs)} configurations x {len(texts)} texts, "
          f"{sum(len(lm.tokenizer(t)['input_ids']) for t in texts)} tokens, {torch.get_num_threads()} threads")

    start = time.perf_counter()
    ours = score_configs(lm, languages, configs, [Variant("notebook", "per-tensor", "all-weights", False)],
                         args.bits, batch_size=16, max_length=256)
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    reference = ablation_perplexities(lm.info.source, lm.tokenizer, texts, configs, args.bits)
    t_ref = time.perf_counter() - start

    index = {(lang, sample): k for k, (lang, sample, _) in enumerate(languages.texts())}
    diffs = [abs(r.ppl - reference[(r.config, index[(r.lang, r.sample)])])
             / reference[(r.config, index[(r.lang, r.sample)])]
             for r in ours.itertuples()]
    print(f"notebook reload loop : {t_ref:8.2f} s")
    print(f"layerscope           : {t_ours:8.2f} s")
    print(f"notebook / layerscope = {t_ref / t_ours:5.2f}x   (target >= 4x)")
    print(f"largest relative perplexity difference: {max(diffs):.2e} over {len(diffs)} (config, text) pairs; "
          f"median ppl all_quantized / baseline = "
          f"{np.median([reference[('all_quantized', k)] / reference[('baseline', k)] for k in range(len(texts))]):.3g}")


if __name__ == "__main__":
    main()
