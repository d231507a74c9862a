"""The engine's numbers on a CUDA GPU against independent references: the equality checks of the test suite, on
the device (the suite itself runs on the CPU).

    python benchmarks/gpu_equality.py                 # needs a CUDA GPU; exits 1 when a check fails
    python benchmarks/gpu_equality.py --device cpu    # the same checks on the CPU (what CI runs as tests)

For each tiny architecture of ``tests/tiny.py`` (Llama, GPT-2, GPT-NeoX, OPT, Gemma 3; with and without a BOS
token), in float32:
  hooks       ``extract`` on the device against a loop of one text at a time through transformers'
              ``output_hidden_states``, pooled by hand (mean without a BOS token, last, first): relative 1e-4
  nll         each text's mean NLL against transformers' ``labels`` loss: relative 1e-5
  device      ``extract`` on the device against ``extract`` on the CPU, every pooling and layer: relative 1e-4
Then:
  bf16 flags  the massive-token flags of bfloat16 and float16 states on the device (the 16-bit histogram) against
              ``np.median`` in a loop over texts, on random states with planted peaks and on a tiny model's states
  bf16 pooled ``extract`` of a bfloat16 model, one text per batch, against the same text's hidden states pooled by
              hand in float32: relative 1e-5 (in a padded batch bfloat16 states differ by rounding)
  syncs       host synchronisations (Tensor.cpu/item/tolist/numpy/__bool__, torch.cuda.synchronize on the main
              thread) per batch beyond the bare forward pass's own, with 2 and 6 layers: equal, and at most 1
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import tiny  # noqa: E402
from layerscope import extract  # noqa: E402
from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask  # noqa: E402
from layerscope.models import LoadedModel  # noqa: E402

FAILED: list[str] = []


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.max(np.linalg.norm(got - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)))


def on(lm: LoadedModel, device: torch.device, dtype: torch.dtype = torch.float32) -> LoadedModel:
    return LoadedModel.wrap(lm.model.to(device=device, dtype=dtype), lm.tokenizer, name=f"{lm.info.name}-{device}")


@torch.no_grad()
def by_hand(lm: LoadedModel, text: str) -> dict:
    """One text alone through transformers: hidden states pooled by hand in float32, and its labels loss."""
    enc = lm.tokenizer(text, return_tensors="pt").to(lm.model.device)
    out = lm.model(**enc, labels=enc["input_ids"], output_hidden_states=True)
    hs = [h[0].float() for h in out.hidden_states]
    start = 1 if lm.info.adds_bos else 0
    return {"mean": np.stack([h[start:].mean(0).cpu().numpy() for h in hs]),
            "last": np.stack([h[-1].cpu().numpy() for h in hs]),
            "first": np.stack([h[0].cpu().numpy() for h in hs]), "loss": out.loss.item()}


def equality(device: torch.device) -> None:
    for arch in tiny.ARCHS:
        for bos in (False, True):
            name = f"{arch}-{'bos' if bos else 'nobos'}"
            cpu = tiny.tiny_lm(arch, adds_bos=bos)
            ref_cpu = extract(cpu, tiny.TEXTS, batch_size=4, cache=False, progress=False)
            lm = on(tiny.tiny_lm(arch, adds_bos=bos), device)
            acts = extract(lm, tiny.TEXTS, batch_size=4, cache=False, progress=False)
            refs = [by_hand(lm, t) for t in tiny.TEXTS]
            hooks = max(rel_err(acts.pooled[p][i], r[p]) for p in ("mean", "last", "first")
                        for i, r in enumerate(refs))
            nll = max(abs(acts.nll_mean[i] - r["loss"]) / abs(r["loss"]) for i, r in enumerate(refs))
            across = max(rel_err(np.asarray(acts.pooled[p]), np.asarray(ref_cpu.pooled[p])) for p in acts.pooled)
            across = max(across, *(rel_err(acts.pre_norm[p], ref_cpu.pre_norm[p]) for p in acts.pooled))
            check(f"hooks {name}", hooks < 1e-4, f"largest relative error {hooks:.1e} (bound 1e-4)")
            check(f"nll {name}", nll < 1e-5, f"largest relative error {nll:.1e} (bound 1e-5)")
            check(f"device vs cpu {name}", across < 1e-4, f"largest relative error {across:.1e} (bound 1e-4)")


def naive_flags(hidden: np.ndarray, real: np.ndarray) -> np.ndarray:
    flags = np.zeros(real.shape, dtype=bool)
    for b in range(len(real)):
        mag = np.abs(hidden[b][real[b]]).astype(np.float32)
        if len(mag):
            flags[b, real[b]] = mag.max(axis=1) > np.float32(MASSIVE_RATIO) * np.median(mag)
    return flags


def flags16(device: torch.device) -> None:
    rng = np.random.default_rng(0)
    differ = total = flagged = 0
    for trial in range(30):
        B, T, d = int(rng.integers(1, 9)), int(rng.integers(2, 30)), int(rng.choice([64, 576, 4096]))
        hidden = rng.lognormal(0, rng.uniform(0.2, 2.0), size=(B, T, d)) * rng.choice([-1, 1], size=(B, T, d))
        for _ in range(B * 2):
            hidden[rng.integers(B), rng.integers(T), rng.integers(d)] *= rng.choice([50.0, 99.0, 101.0, 300.0])
        lengths = rng.integers(1, T + 1, size=B)
        real = np.arange(T)[None, :] < lengths[:, None]
        hidden[~real] = [np.nan, 1e30][trial % 2]
        for dtype in (torch.bfloat16, torch.float16):
            h = torch.from_numpy(hidden.astype(np.float32)).to(device=device, dtype=dtype)
            got = massive_mask(h, torch.from_numpy(real).to(device)).cpu().numpy()
            with np.errstate(invalid="ignore", over="ignore"):
                ref = naive_flags(h.float().cpu().numpy(), real)
            differ += int((got != ref).sum())
            total += int(real.sum())
            flagged += int(ref.sum())
    lm = on(tiny.tiny_lm("llama"), device, torch.bfloat16)
    enc = lm.tokenizer(tiny.TEXTS, padding=True, return_tensors="pt").to(device)
    with torch.no_grad():
        states = lm.model(**enc, output_hidden_states=True).hidden_states
    real = enc["attention_mask"].bool()
    for h in states:
        got = massive_mask(h, real, 2.0).cpu().numpy()
        mag = h.float().cpu().numpy()
        ref = np.zeros(real.shape, dtype=bool)
        for b in range(len(real)):
            m = np.abs(mag[b][real[b].cpu().numpy()])
            ref[b, real[b].cpu().numpy()] = m.max(axis=1) > np.float32(2.0) * np.median(m)
        differ += int((got != ref).sum())
        total += int(real.sum())
        flagged += int(ref.sum())
    check("bf16/fp16 massive flags", differ == 0, f"{differ} of {total} token flags differ from np.median "
          f"({flagged} massive)")


def pooled_bf16(device: torch.device) -> None:
    lm = on(tiny.tiny_lm("llama", adds_bos=True), device, torch.bfloat16)
    acts = extract(lm, tiny.TEXTS, batch_size=1, cache=False, progress=False)  # the reference's own inputs
    refs = [by_hand(lm, t) for t in tiny.TEXTS]
    err = max(rel_err(acts.pooled[p][i], r[p]) for p in ("mean", "last", "first") for i, r in enumerate(refs))
    check("bf16 pooled", err < 1e-5, f"largest relative error {err:.1e} against the states pooled by hand")


class Syncs:
    """Counts the main thread's host synchronisations while installed (``with Syncs() as s: ...; s.calls``)."""

    NAMES = ("cpu", "item", "tolist", "numpy", "__bool__")

    def __enter__(self):
        self.calls, self.saved, main = 0, {}, threading.main_thread()

        def counting(original):
            def wrapper(*args, **kwargs):
                if threading.current_thread() is main:
                    self.calls += 1
                return original(*args, **kwargs)
            return wrapper

        for name in self.NAMES:
            self.saved[(torch.Tensor, name)] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, counting(getattr(torch.Tensor, name)))
        self.saved[(torch.cuda, "synchronize")] = torch.cuda.synchronize
        torch.cuda.synchronize = counting(torch.cuda.synchronize)
        return self

    def __exit__(self, *exc):
        for (owner, name), original in self.saved.items():
            setattr(owner, name, original)


def syncs(device: torch.device) -> None:
    per_batch = {}
    for n_layers in (2, 6):
        lm = on(tiny.tiny_lm("llama", adds_bos=True, n_layers=n_layers), device)
        extract(lm, tiny.TEXTS, batch_size=2, cache=False, progress=False)  # the head's one-time probe
        enc = lm.tokenizer(tiny.TEXTS[:4], padding=True, return_tensors="pt").to(device)
        with Syncs() as bare, torch.inference_mode():
            lm.model(**enc, use_cache=False)
        with Syncs() as counted:
            acts = extract(lm, tiny.TEXTS, batch_size=2, cache=False, progress=False)
        batches = acts.stats.batches_computed
        per_batch[n_layers] = (counted.calls - bare.calls * batches) / batches
        print(f"     {n_layers} layers: {counted.calls} syncs in {batches} batches; the bare forward {bare.calls}")
    check("syncs per batch", per_batch[2] == per_batch[6] and per_batch[6] <= 1,
          f"beyond the model's own: {per_batch} (bound 1, equal for 2 and 6 layers)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_equality.py needs a CUDA GPU (or --device cpu)", file=sys.stderr)
        return 2
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{label}, torch {torch.__version__}")
    for part in (equality, flags16, pooled_bf16, syncs):
        try:
            part(device)
        except Exception as exc:  # noqa: BLE001 - one broken part must not hide the others
            check(part.__name__, False, f"raised {type(exc).__name__}: {exc}")
    print(f"{len(FAILED)} checks failed: {FAILED}" if FAILED else "every check passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
