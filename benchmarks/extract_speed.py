"""Time ``extract`` at its default settings against the bare forward pass a user would write, and check the
massive flags.

    .venv/bin/python benchmarks/extract_speed.py [--model smollm2-135m] [--device cuda] [--repeats 3] [--check]
        [--batch-sizes 16 32 64] [--order unsorted sorted] [--texts statements|pairs|FILE] [--limit N] [--pairs 20]
        [--profile]

The reference is what a user compares against, not layerscope's own loop: a second copy of the model loaded by
transformers itself (``AutoModelForCausalLM.from_pretrained`` of the same folder layerscope loads, e.g. the zoo's
converted SmolLM2, in the dtype ``load_model`` picks: float32 on a CPU), eval mode, ``torch.inference_mode()``,
its own ``AutoTokenizer`` (pad token = EOS where it has none), and per batch of texts

    enc = tok(batch_texts, padding=True, return_tensors="pt")
    model(**enc, use_cache=False)                      # the full logits made and dropped, nothing else kept

timed *with* the tokenization, as extract is timed with its own. ``use_cache=False`` only makes the reference
faster (no key/value cache is built), so the ratio is not flattered by it.

Texts (``--texts``): by default ``benchmarks/statements.txt``, 300 statements of 10-60 SmolLM2 tokens (median
about 33) written for this benchmark, so the check does not run on the bundled pairs that extract was tuned on
(``--texts pairs``: the bundled pairs' 308 texts, 7-29 tokens; or a file of one text a line).

Orders (``--order``): ``unsorted`` feeds the texts in the file's order, as a user typically would; ``sorted``
feeds them longest first by the bare tokenizer's own token count (outside the timing), so batches carry almost
no padding: the fastest bare pass a careful user would write. With texts of 10-60 tokens an
unsorted batch of 16 is padded to about its longest text, roughly 1.6x the real tokens, so the unsorted pass
pays for padding that extract (which sorts by token count) never computes. The ratio that ``--check`` gates is
the strict one: extract against the fastest bare pass of either order and any of ``--batch-sizes``.

  extract  layerscope.extract(lm, texts, cache=False) with ``lm = load_model(model)``, at its defaults: the five
           poolings (mean, last, first, mean_no_pos0, mean_no_massive), every layer, the NLL, its own batch plan,
           its own tokenization (one tokenizer call over the list); the store goes to a temp folder on disk and
           is removed after
  bare     the loop above, at each of ``--batch-sizes`` texts per batch (default 16 32 64 on a CPU) and each
           ``--order``; the fastest counts

After a warm-up, each of ``--repeats`` rounds runs every bare variant and extract once (interleaved, so a busy
machine slows both alike); each time is the best of its rounds, CUDA synchronized before and after, and the
fastest bare variant is the one with the best time. Then ``--pairs`` paired runs: the fastest bare variant and
extract back to back, the order alternating from pair to pair (bare first, then extract first: a machine that
slows or speeds up steadily favours neither), each pair's ratio extract / bare. Their median and its 95 %
distribution-free interval (the sign test's order statistics, ``scipy.stats.quantile_test``) are the paired
statistic: on this 2-core machine the speed drifts by a third within minutes, which moves a ratio of two
best times by more than the effect measured, while two runs seconds apart drift together.

Prints every time with its runs, the ratios (target <= 1.10x, gated two ways: best round against best round, and
the upper end of the paired median's 95 % interval; each round's own ratio beside them, not gated), the same
bare loop on ``load_model``'s model against transformers' own (paired the same way), the minor page faults of one
pass of each, with ``--profile`` a torch.profiler table of extract's ops against the fastest bare pass's (the extra
time per op, and the time no op accounts for), and whether the
massive-token flags that ``mean_no_massive`` uses (:func:`layerscope.engine.forward.massive.massive_mask` at every
decoder block output, each batch as extract plans it) equal a naive reference: per text and block, numpy's
``np.median`` of the text's |activations| over its real tokens and every dimension, a token massive where its
largest |activation| is above 100x it.
``--check`` exits with status 1 if either gated ratio is above 1.10 or a flag differs (it needs ``--pairs`` >= 6:
fewer pairs give no 95 % interval). With ``--pairs 0`` (a profile run) no ratio is stated against the target.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import quantile_test

from layerscope import extract, load_model, load_pairs
from layerscope.engine.forward.batching import CPU_TOKEN_BUDGET, collate, pad_id, plan_ranges, tokenize
from layerscope.engine.forward.capture import PRE_NORM, capture_states
from layerscope.engine.forward.massive import MASSIVE_RATIO, massive_mask
from layerscope.models import input_device
from layerscope.models.zoo import ZOO, zoo_folder

TARGET = 1.10
STATEMENTS = Path(__file__).with_name("statements.txt")
ORDERS = ("unsorted", "sorted")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn, *args, **kwargs) -> float:
    sync(device)
    start = time.perf_counter()
    fn(*args, **kwargs)
    sync(device)
    return time.perf_counter() - start


def paired(device: torch.device, first, second, n: int) -> list[float]:
    """``n`` pairs of runs of ``first()`` and ``second()`` back to back, ``first`` first in even pairs and
    ``second`` first in odd ones; each pair's time of ``second`` over that of ``first``."""
    ratios = []
    for i in range(n):
        runs = {}
        for name in ("first", "second") if i % 2 == 0 else ("second", "first"):
            runs[name] = timed(device, first if name == "first" else second)
        ratios.append(runs["second"] / runs["first"])
    return ratios


def median_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The median of ``ratios`` and its 95 % distribution-free interval (the sign test's order statistics;
    NaN, NaN with fewer than 6 ratios)."""
    ci = quantile_test(ratios, q=float(np.median(ratios)), p=0.5).confidence_interval(0.95)
    return float(np.median(ratios)), float(ci.low), float(ci.high)


def page_faults(fn) -> int:
    """Minor page faults of this process during ``fn()``: pages the kernel mapped afresh (on a CPU, every large
    tensor a pass allocates anew costs one per 4 KiB, zeroed)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def read_texts(which: str) -> list[str]:
    """``statements`` (benchmarks/statements.txt), ``pairs`` (the bundled pairs' texts) or a file, one text a line
    (blank lines and lines starting with ``#`` skipped)."""
    if which == "pairs":
        return [t for c in load_pairs().categories for p in c.pairs for t in p]
    path = STATEMENTS if which == "statements" else Path(which)
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def load_bare(model: str, dtype: torch.dtype, device: torch.device):
    """The model and tokenizer as a user loads them with transformers alone, from the folder layerscope loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(zoo_folder(model)) if model in ZOO else model
    bare = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device).eval()
    tok = AutoTokenizer.from_pretrained(source)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return bare, tok


@torch.inference_mode()
def bare_pass(model, tok, texts: list[str], batch_size: int, device: torch.device) -> None:
    """A user's loop: tokenize each batch of ``texts`` with padding, run the model, keep nothing."""
    for i in range(0, len(texts), batch_size):
        enc = tok(texts[i : i + batch_size], padding=True, return_tensors="pt").to(device)
        model(**enc, use_cache=False)
    sync(device)


def profile_table(ours, theirs, device: torch.device, rows: int = 25) -> str:
    """A torch.profiler table of ``ours`` (extract) against ``theirs`` (the fastest bare pass): each op's own time
    (self CPU, or self device time on CUDA) and calls in both, the ops ``ours`` spends most extra time in first, and
    a last line for what no op accounts for (Python, hooks, threads waiting: the wall time left over)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def ops(fn):
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            fn()
            sync(device)
        wall = time.perf_counter() - start
        field = "self_device_time_total" if cuda else "self_cpu_time_total"
        table = {e.key: (getattr(e, field) / 1e6, e.count) for e in prof.key_averages()}
        return table, wall

    a, wall_a = ops(ours)
    b, wall_b = ops(theirs)
    keys = sorted(set(a) | set(b), key=lambda k: b.get(k, (0, 0))[0] - a.get(k, (0, 0))[0])
    lines = [f"{'op (self ' + ('device' if cuda else 'CPU') + ' time)':<52}{'extract s':>10}{'calls':>8}"
             f"{'bare s':>10}{'calls':>8}{'extra s':>10}"]
    for k in keys[:rows]:
        (ta, ca), (tb, cb) = a.get(k, (0.0, 0)), b.get(k, (0.0, 0))
        lines.append(f"{k[:51]:<52}{ta:10.3f}{ca:8d}{tb:10.3f}{cb:8d}{ta - tb:+10.3f}")
    sa, sb = sum(t for t, _ in a.values()), sum(t for t, _ in b.values())
    if not cuda:  # on a CPU the ops' self times add up to the busy time of the calling threads
        lines.append(f"{'(no op: Python, hooks, waits; wall - ops)':<52}{wall_a - sa:10.3f}{'':8}{wall_b - sb:10.3f}"
                     f"{'':8}{(wall_a - sa) - (wall_b - sb):+10.3f}")
    lines.append(f"{'wall (under the profiler)':<52}{wall_a:10.3f}{'':8}{wall_b:10.3f}{'':8}{wall_a - wall_b:+10.3f}")
    return "\n".join(lines)


def padded_share(lengths: list[int], batch_size: int) -> float:
    """Padded tokens (each batch as wide as its longest text) over real tokens, batches in the given order."""
    padded = sum(len(chunk) * max(chunk) for i in range(0, len(lengths), batch_size)
                 for chunk in [lengths[i : i + batch_size]])
    return padded / sum(lengths)


def naive_flags(hidden: np.ndarray, real: np.ndarray) -> np.ndarray:
    """(B, T) bool: per text (a loop), |hidden| (B, T, d) over its real tokens; np.median of all those values."""
    flags = np.zeros(real.shape, dtype=bool)
    for b in range(len(real)):
        mag = np.abs(hidden[b][real[b]]).astype(np.float32)  # (n_real, d)
        flags[b, real[b]] = mag.max(axis=1) > MASSIVE_RATIO * np.median(mag)
    return flags


@torch.inference_mode()
def check_flags(lm, ids: list[list[int]]) -> tuple[int, int, int]:
    """Batches as extract plans them on a CPU (or 64 texts on a GPU); every decoder block output's flags by
    massive_mask against :func:`naive_flags`. Returns (differing flags, massive (token, block) pairs, real tokens)."""
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(-lengths, kind="stable")
    device = input_device(lm.model)
    budget = CPU_TOKEN_BUDGET if device.type == "cpu" else None
    n_layers = lm.info.n_layers
    differ = flagged = checked = 0
    for lo, hi in plan_ranges(lengths[order], np.ones(len(ids), dtype=bool), 64, budget):
        index = order[lo:hi]
        batch = collate([ids[i] for i in index], index, pad_id(lm.tokenizer)).to(device)
        real = batch.attention_mask.bool()
        states: dict = {}
        keep = states.__setitem__  # states[key] = hidden, as each block's output arrives
        with capture_states(lm, list(range(1, n_layers)), keep):
            lm.model(**batch.model_inputs(), use_cache=False)
        assert len(states) == n_layers and PRE_NORM in states  # blocks 1 .. n_layers - 1 and the last one
        for hidden in states.values():
            got = massive_mask(hidden, real).cpu().numpy()
            ref = naive_flags(hidden.float().cpu().numpy(), real.cpu().numpy())
            differ += int((got != ref).sum())
            flagged += int(ref.sum())
        checked += int(real.sum())
    return differ, flagged, checked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="a zoo name or a model folder")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the model's default, CUDA if any)")
    parser.add_argument("--texts", default="statements",
                        help="statements (benchmarks/statements.txt, the default), pairs (the bundled pairs' texts) "
                             "or a file of one text a line")
    parser.add_argument("--limit", type=int, default=None, help="use the first N texts (default: all)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                        help="bare texts per batch to try (default: 16 32 64 on a CPU, 32 64 128 256 on a GPU)")
    parser.add_argument("--order", nargs="+", choices=ORDERS, default=list(ORDERS),
                        help="bare-pass text orders to time (default: both; the fastest counts)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of every bare variant and extract, interleaved (default 3)")
    parser.add_argument("--pairs", type=int, default=20,
                        help="paired runs of the fastest bare variant and extract, order alternating (default 20)")
    parser.add_argument("--profile", action="store_true",
                        help="print a torch.profiler table: each op's time in extract against the fastest bare pass")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if the best-round ratio or the paired interval's upper end is above {TARGET}, "
                             "or a flag differs")
    args = parser.parse_args()
    if args.repeats < 1 or args.pairs < 0:
        parser.error("--repeats must be at least 1 and --pairs at least 0")
    if args.check and args.pairs < 6:
        parser.error(f"--check needs --pairs 6 or more (got {args.pairs}): fewer pairs give no 95 % interval")

    lm = load_model(args.model, device=args.device)
    device = input_device(lm.model)
    bare, tok = load_bare(args.model, next(lm.model.parameters()).dtype, device)
    texts = read_texts(args.texts)[: args.limit]
    counts = [len(x) for x in tok(texts)["input_ids"]]  # the bare tokenizer's own token counts
    feeds = {"unsorted": texts, "sorted": [texts[i] for i in np.argsort(counts, kind="stable")[::-1]]}
    ids = tokenize(lm.tokenizer, texts)
    lengths = [len(x) for x in ids]
    sizes = args.batch_sizes or ([16, 32, 64] if device.type == "cpu" else [32, 64, 128, 256])
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"model {lm.info.name} ({lm.info.n_layers} layers, d={lm.info.hidden_size}, {lm.info.dtype}) on {where}; "
          f"bare: transformers' own {type(bare).__name__} ({bare.config._attn_implementation} attention)")
    print(f"{len(texts)} texts ({args.texts}), {sum(lengths)} tokens, {min(lengths)}-{max(lengths)} per text "
          f"(median {int(np.median(lengths))}); padded / real tokens of the bare batches: "
          + ", ".join(f"{size}: {padded_share(lengths, size):.2f} unsorted" for size in sizes)
          + "; extract: default poolings, every layer, NLL, cache=False")

    variants = [(order, size) for order in args.order for size in sizes]
    for order, size in variants:  # warm-up
        bare_pass(bare, tok, feeds[order][: 2 * size], size, device)
    extract(lm, texts[:64], cache=False, progress=False)
    t_bare: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    t_extract: list[float] = []
    for _ in range(args.repeats):
        for order, size in variants:
            t_bare[order, size].append(timed(device, bare_pass, bare, tok, feeds[order], size, device))
        t_extract.append(timed(device, extract, lm, texts, cache=False, progress=False))
        print(f"round {len(t_extract)}: " + ", ".join(f"bare {o} {s} {t_bare[o, s][-1]:.2f} s" for o, s in variants)
              + f", extract {t_extract[-1]:.2f} s", file=sys.stderr, flush=True)

    acts = extract(lm, texts, cache=False, progress=False)
    ext = min(t_extract)
    for order, size in variants:
        print(f"bare, {order:>8}, {size:>3} texts per batch : {min(t_bare[order, size]):8.3f} s   "
              f"(runs: {_runs(t_bare[order, size])})")
    print(f"extract (5 poolings)                : {ext:8.3f} s   (runs: {_runs(t_extract)}; {acts.stats.batches} "
          f"batches, {len(texts) / acts.stats.batches:.0f} texts per batch)")
    for order in args.order:
        best = min(sizes, key=lambda size, order=order: min(t_bare[order, size]))
        print(f"extract / bare {order:>8} (best, {best} per batch) = {ext / min(t_bare[order, best]):.3f}x")
    fastest = min(variants, key=lambda v: min(t_bare[v]))
    ratio = ext / min(t_bare[fastest])
    gated = f"(target <= {TARGET:.2f}x)" if args.pairs else "(one round's best; not gated: no paired runs)"
    print(f"extract / fastest bare ({fastest[0]}, {fastest[1]} per batch) = {ratio:.3f}x   {gated}")
    per_round = [t / min(t_bare[v][i] for v in variants) for i, t in enumerate(t_extract)]
    print("round by round, extract / the fastest bare variant of the same round: "
          + ", ".join(f"{x:.3f}" for x in per_round) + f"; median {np.median(per_round):.3f}x   (not gated: extract "
          "runs last in each round)")

    def fastest_bare():
        bare_pass(bare, tok, feeds[fastest[0]], fastest[1], device)

    def default_extract():
        extract(lm, texts, cache=False, progress=False)

    upper = None
    if args.pairs:
        pairs = paired(device, fastest_bare, default_extract, args.pairs)
        mid, low, upper = median_interval(pairs)
        print(f"paired, extract / fastest bare run back to back ({args.pairs} pairs, order alternating): "
              + ", ".join(f"{x:.3f}" for x in pairs))
        print(f"paired median = {mid:.3f}x, 95 % interval {low:.3f}-{upper:.3f}x: upper end {upper:.3f}x   "
              f"(target <= {TARGET:.2f}x)")

    same = paired(device, fastest_bare, lambda: bare_pass(lm.model, tok, feeds[fastest[0]], fastest[1], device),
                  max(6, args.pairs // 2))
    mid, low, high = median_interval(same)
    print(f"the same bare loop on load_model's model / on transformers' own, {len(same)} pairs: median {mid:.3f}x, "
          f"95 % interval {low:.3f}-{high:.3f}x   (nothing left hooked on it: 1.00x inside the interval)")
    faults = {"extract": page_faults(default_extract), "bare": page_faults(fastest_bare)}
    print(f"minor page faults in one pass: extract {faults['extract']:,}, the fastest bare loop {faults['bare']:,}")
    if args.profile:
        print(profile_table(default_extract, fastest_bare, device))
    differ, flagged, checked = check_flags(lm, ids)
    n_blocks = lm.info.n_layers
    print(f"massive flags vs the naive np.median reference: {differ} of {checked * n_blocks} (token, block) flags "
          f"differ ({flagged} massive) over {checked} tokens x {n_blocks} block outputs"
          f" -> {'identical' if differ == 0 else 'DIFFERENT'}")
    if args.check and (ratio > TARGET or not upper <= TARGET or differ):
        return 1
    return 0


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in times)


if __name__ == "__main__":
    sys.exit(main())
