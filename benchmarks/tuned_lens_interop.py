"""Check that a tuned lens is interchangeable with the tuned-lens package: saved here and loaded there, and the
other way round, on a tiny random Llama; prints the largest logit difference each way (target: 0 or float noise)
and whether the ``unembed_hash`` layerscope records is the package's own.

    .venv/bin/pip download --no-deps tuned-lens -d /tmp/tl && mkdir -p /tmp/tl/pkg \\
        && python -m zipfile -e /tmp/tl/tuned_lens-*.whl /tmp/tl/pkg
    .venv/bin/python benchmarks/tuned_lens_interop.py --package /tmp/tl/pkg

The package is put on ``sys.path`` from its unpacked wheel (its own dependencies are layerscope's: torch,
transformers, huggingface_hub), so nothing is installed into the environment. Not a test: tuned-lens is not a
dependency of layerscope.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", required=True, help="folder holding the unpacked tuned_lens package")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here.parent / "tests"), args.package]
    from tuned_lens.nn import TunedLens as PackageLens

    import tiny
    from layerscope.engine.lenses.tuned import TunedLens
    from layerscope.models import load_model

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        lm = load_model(str(tiny.save(Path(tmp) / "tiny", "llama", adds_bos=False, n_layers=3)))
        ids = lm.tokenizer("the cat sat on the mat", return_tensors="pt")["input_ids"]
        with torch.no_grad():
            hidden = lm.model(input_ids=ids, output_hidden_states=True).hidden_states
            ours = TunedLens.zeros(lm)
            for t in ours.translators:
                t.weight.normal_(0, 0.2)
                t.bias.normal_(0, 0.2)
            ours.save(Path(tmp) / "ours")
            theirs = PackageLens.from_model_and_pretrained(lm.model, str(Path(tmp) / "ours"), weights_only=True)
            there = max(float((ours.logits(s, hidden[s][0], lm=lm) - theirs(hidden[s][0], s)).abs().max())
                        for s in range(lm.info.n_layers))
            written = PackageLens.from_model(lm.model)
            for t in written.layer_translators:
                t.weight.normal_(0, 0.2)
                t.bias.normal_(0, 0.2)
            written.save(str(Path(tmp) / "theirs"))
            back = TunedLens.load(Path(tmp) / "theirs", lm)
            here_diff = max(float((back.logits(s, hidden[s][0], lm=lm) - written(hidden[s][0], s)).abs().max())
                            for s in range(lm.info.n_layers))
            from tuned_lens.nn.unembed import Unembed

            from layerscope.engine.lenses.tuned_train import unembed_hash
            same_hash = Unembed(lm.model).unembedding_hash() == unembed_hash(lm)
    print(f"saved by layerscope, read by tuned-lens: largest |logit difference| {there:.1e}")
    print(f"saved by tuned-lens, read by layerscope: largest |logit difference| {here_diff:.1e}")
    print(f"layerscope's unembed_hash is the package's Unembed.unembedding_hash(): {same_hash}")


if __name__ == "__main__":
    main()
