"""Peak host memory (RSS) of loading a ~1B-parameter bfloat16 model with layerscope, against the weights' size.

    .venv/bin/python benchmarks/load_rss.py [--layers 18] [--keep DIR]

Needs about 10 GB of RAM and a few minutes. Steps, each in a fresh child process (so one's memory never
counts in another's peak):
  build        a Llama model from the LlamaConfig below, random weights, built on the meta device and
               materialised in bfloat16 (never in float32), saved with save_pretrained (safetensors)
  layerscope   layerscope.load_model(folder, dtype="bfloat16", device="cpu"): the whole load, including
               describe() (probe forward passes, weights_hash); the peak before describe() is shown too
  direct       AutoModelForCausalLM.from_pretrained(folder, dtype=bfloat16, device_map={"": "cpu"}) alone
  no-map       from_pretrained(folder, dtype=bfloat16) with no device_map, then .to("cpu") (the old way)
  fp32-first   from_pretrained(folder, dtype=float32), then .to(torch.bfloat16): a float32 host copy first
Each measuring child records RSS after importing torch, transformers and layerscope (the baseline), loads,
and reports its peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``). Printed: the weights' size (bytes of the
safetensors files), peak, baseline, peak - baseline, and peak / weights and (peak - baseline) / weights
against the 1.3x target; then each reference's peak - baseline over layerscope's.

On CPU the loaded tensors stay views of the memory-mapped safetensors files: a page counts in RSS only once
something reads it. layerscope's describe() reads every weight (the probe forward passes, weights_hash), so
the references read every weight too, with the same weights_hash, after loading ("load" column: the peak
before that read; for layerscope, the peak before describe()); any real use of the model reads them all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
TARGET = 1.3
MODES = ("layerscope", "direct", "no-map", "fp32-first")


def llama_config(layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=layers, num_attention_heads=16,
                       num_key_value_heads=16, vocab_size=32000, max_position_embeddings=2048,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def build(folder: Path, layers: int) -> None:
    """Write a random bfloat16 Llama model and a small tokenizer to ``folder`` (run in a child process)."""
    import torch
    from transformers import LlamaForCausalLM

    sys.path.insert(0, str(HERE.parents[1] / "tests"))
    import tiny  # a tokenizer trained in code (ids < 400, well inside the vocabulary)

    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(layers))
    model.to_empty(device="cpu")  # bfloat16 storage, uninitialised: nothing is ever float32
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0.0, 0.02)
    n = sum(p.numel() for p in model.parameters())
    model.config.dtype = torch.bfloat16
    model.save_pretrained(folder)
    tiny.tokenizer(True).save_pretrained(folder)
    print(json.dumps({"parameters": n, "dtypes": sorted({str(p.dtype) for p in model.parameters()})}))


def measure(mode: str, folder: Path) -> None:
    """Load ``folder`` one way and print the RSS figures as JSON (run in a fresh child process)."""
    import resource

    import psutil
    import torch
    import transformers

    import layerscope
    from layerscope.models import load as load_module
    from layerscope.models.info import weights_hash

    baseline = psutil.Process().memory_info().rss
    result: dict = {"mode": mode, "baseline": baseline}

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    if mode == "layerscope":
        describe = load_module.describe

        def timed_describe(*args, **kwargs):  # the peak of the loading alone, before the probes and the hash
            result["peak_before_describe"] = peak()
            return describe(*args, **kwargs)

        load_module.describe = timed_describe
        lm = layerscope.load_model(str(folder), dtype="bfloat16", device="cpu")
        model = lm.model
    elif mode == "direct":
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, device_map={"": "cpu"})
    elif mode == "no-map":
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to("cpu")
    elif mode == "fp32-first":
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        model = model.to(torch.bfloat16)
    else:
        raise SystemExit(f"unknown mode {mode}; use one of {', '.join(MODES)}")
    if mode != "layerscope":
        result["peak_before_describe"] = peak()
        weights_hash(model)  # reads every weight, as layerscope's describe() does
    result["dtypes"] = sorted({str(p.dtype) for p in model.parameters()})
    result["peak"] = peak()
    result["rss_after"] = psutil.Process().memory_info().rss
    print(json.dumps(result))


def child(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE), *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / 2**30:6.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=18)
    parser.add_argument("--keep", type=Path, help="Build the model into this folder and keep it (reused if there).")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        return build(args.build, args.layers)
    if args.measure:
        return measure(args.measure[0], Path(args.measure[1]))

    with tempfile.TemporaryDirectory(prefix="layerscope-load-rss-") as tmp:
        folder = args.keep or Path(tmp) / "llama-1b"
        if not (folder / "config.json").exists():
            built = child("--build", str(folder), "--layers", str(args.layers))
            print(f"built a Llama model: {built['parameters']:,} parameters, {built['dtypes']}, {args.layers} layers")
        weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        print(f"weights: {weights:,} bytes ({gib(weights).strip()}) in safetensors files\n")
        rows = {mode: child("--measure", mode, str(folder)) for mode in MODES}

    print(f"{'mode':<12} {'load':>11} {'peak RSS':>11} {'baseline':>11} {'peak-base':>11} {'peak/w':>7} "
          f"{'(p-b)/w':>8}  dtypes")
    for mode, r in rows.items():
        extra = r["peak"] - r["baseline"]
        print(f"{mode:<12} {gib(r['peak_before_describe'])} {gib(r['peak'])} {gib(r['baseline'])} {gib(extra)} "
              f"{r['peak'] / weights:7.2f} {extra / weights:8.2f}  {','.join(r['dtypes'])}")
    ours = rows["layerscope"]
    extra = ours["peak"] - ours["baseline"]
    before = ours["peak_before_describe"] - ours["baseline"]
    print(f"\nlayerscope: (peak - baseline) / weights = {extra / weights:.2f} (target <= {TARGET}): "
          f"{'met' if extra / weights <= TARGET else 'NOT met'}; peak / weights = {ours['peak'] / weights:.2f}")
    added = ours["peak"] - ours["peak_before_describe"]
    print(f"layerscope peak before describe() (probes, weights_hash): {gib(ours['peak_before_describe']).strip()} "
          f"(- baseline: {before / weights:.2f}x weights); describe() added {gib(added).strip()} "
          f"({added / weights:.2f}x weights: the mapped weights read in, plus the probes' activations)")
    for mode in MODES[1:]:
        ref = rows[mode]["peak"] - rows[mode]["baseline"]
        print(f"{mode} / layerscope (peak - baseline): {ref / extra:.2f}x")


if __name__ == "__main__":
    main()
