"""Run the CPU benchmarks into kept outputs, and write the speed pages from what is kept.

    .venv/bin/python tools/bench_findings.py record benchmarks/results/cpu   # run every CPU benchmark (over an hour)
    python tools/bench_findings.py record benchmarks/results/gpu --set gpu   # on a machine with a CUDA GPU
    .venv/bin/python tools/bench_findings.py record benchmarks/results/cpu extract_speed_pairs   # one of them
    .venv/bin/python tools/bench_findings.py write    # the pages' bench-* blocks again from the kept outputs
    .venv/bin/python tools/bench_findings.py check    # exit 1 naming the pages that differ (tests/test_bench_pages.py)

``record`` runs each benchmark of a set (``CPU`` or ``GPU``) in its own process and keeps what it printed in
``OUT/<name>.txt``, under one header line: ``# <command>   (<machine>, commit <c>, <day>)``. Run it on a machine
with nothing else running (the ratios are of interleaved runs in one process, but two cores shared with other
work move them by several percent); every kept output of a folder must name the same machine and day, and a
commit in the history of the one that checks it (tests/test_bench_pages.py), so a folder is one recorded session.

The pages show each kept output whole, between ``<!-- bench-<name>:start -->`` and ``<!-- bench-<name>:end -->``,
and ``bench-targets`` lists every line of every output that states its target. Nothing in them is typed by hand,
and no speed page states a number outside them (tests/test_result_pages.py scans docs/benchmarks.md and
docs/engine.md like every other page).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shlex
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pages import write_blocks

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CPU = {
    "extract_speed_pairs": "extract_speed.py --texts pairs --repeats 3 --pairs 20",
    "extract_speed_statements": "extract_speed.py --texts statements --repeats 3 --pairs 20",
    "extract_speed_profile": "extract_speed.py --texts pairs --repeats 1 --pairs 0 --profile",
    "extract_vs_seed": "extract_vs_seed.py",
    "extract_scale": "extract_scale.py",
    "engine_host": "engine_host.py",
    "load_rss": "load_rss.py",
    "anisotropy_vs_eigh": "anisotropy_vs_eigh.py",
    "ablation_prefix": "ablation_vs_reload.py --part prefix",
    "ablation_reload": "ablation_vs_reload.py --part reload",
    "surgery_reuse": "surgery_reuse.py",
    "steering_reuse": "steering_reuse.py",
    "sweep_ray_vs_serial": "sweep_ray_vs_serial.py",
    "tuned_lens_interop": "tuned_lens_interop.py --package DIR",
}
GPU = {
    "gpu_equality": "gpu_equality.py",
    "extract_gpu": "extract_gpu.py --models llama-3.1-8b --poolings default --repeats 3 --profile",
    "gpu_checks": "gpu_checks.py --profile",
    "massive_gpu": "massive_gpu.py",
    "engine_host_gpu": "engine_host.py --texts 1024 --repeats 2",
}
SETS = {"cpu": CPU, "gpu": GPU}
"""Each set's kept outputs (``benchmarks/results/<set>/<name>.txt``) and the benchmark command (under benchmarks/)
that prints each; ``DIR`` is the tuned-lens package's wheel, downloaded and unpacked by ``record`` (tuned-lens is
not a dependency). Every CPU output must be kept; a GPU output not yet recorded is shown as such."""
PAGES = {
    "docs/benchmarks.md": ["targets", *CPU, *GPU],
    "docs/engine.md": ["engine_host", "ablation_prefix"],
}
"""Which ``bench-<name>`` blocks each page holds."""
HEADER = re.compile(r"^# (?P<command>.+?)   \((?P<machine>.+), commit (?P<commit>[0-9a-f]{7,40}), "
                    r"(?P<day>\d{4}-\d{2}-\d{2})\)$")


def header(path: Path) -> dict[str, str]:
    """The command, machine, commit and day a kept output names on its first line."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    match = HEADER.match(first)
    if not match:
        raise SystemExit(f"{path}: its first line is not '# <command>   (<machine>, commit <c>, <day>)'; "
                         "record it again with tools/bench_findings.py record")
    return match.groupdict()


def output(path: Path) -> list[str]:
    """What the benchmark printed: the kept file without its header, blank lines before and after dropped."""
    return path.read_text(encoding="utf-8").split("\n", 1)[1].strip("\n").rstrip().split("\n")


def block(name: str, kept: Path, benchmarks: dict[str, str], optional: bool) -> str:
    path = kept / f"{name}.txt"
    if not path.is_file():
        if optional:
            return f"`python benchmarks/{benchmarks[name]}`: not recorded yet."
        raise SystemExit(f"{path} is missing: record it with tools/bench_findings.py record {kept} {name}")
    made = header(path)
    lines = "\n".join(output(path))
    return (f"`{made['command']}` on a {made['machine']} (commit {made['commit']}, {made['day']}):\n\n"
            f"```text\n{lines}\n```")


def targets(results: Path) -> str:
    """One table row per output line that names a target, beside the name of the output it comes from."""
    rows = ["| benchmark | what it printed |", "| --- | --- |"]
    kept = [results / where / f"{name}.txt" for where, benchmarks in SETS.items() for name in benchmarks]
    for path in kept:
        if not path.is_file():
            continue
        name = path.stem
        for line in output(path):
            if "target" in line:
                text = " ".join(line.split()).replace("|", "\\|")
                rows.append(f"| `{name}` | `{text}` |")
    return "\n".join(rows)


def write(check: bool, results: Path = RESULTS) -> int:
    bodies = {name: block(name, results / where, benchmarks, optional=where == "gpu")
              for where, benchmarks in SETS.items() for name in benchmarks}
    bodies["targets"] = targets(results)
    blocks = {page: {f"bench-{name}": bodies[name] for name in names} for page, names in PAGES.items()}
    stale = write_blocks(ROOT, blocks, check=check)
    if check and stale:
        print(f"{', '.join(stale)} differ from {results}: run tools/bench_findings.py write",
              file=sys.stderr)
        return 1
    return 0


def machine(where: str) -> str:
    """How a header describes this machine: its CPU's core count, or its GPU's name."""
    if where == "gpu":
        import torch

        return torch.cuda.get_device_name(0)
    return f"{os.cpu_count()}-core CPU, machine otherwise idle"


def tuned_lens_package(scratch: Path) -> str:
    """The tuned-lens package's wheel, downloaded from PyPI and unpacked into ``scratch``; its folder."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "tuned-lens==0.2.0", "-d",
                    str(scratch)], check=True)
    with zipfile.ZipFile(next(scratch.glob("tuned_lens-*.whl"))) as wheel:
        wheel.extractall(scratch / "pkg")
    return str(scratch / "pkg")


def record(out: Path, names: list[str], machine: str, benchmarks: dict[str, str], python: str, commit: str) -> int:
    """Run each named benchmark of ``benchmarks`` (all when none is named) and keep its output in ``out``."""
    unknown = [n for n in names if n not in benchmarks]
    if unknown:
        raise SystemExit(f"no benchmark named {', '.join(unknown)} here; the names are {', '.join(benchmarks)}")
    out.mkdir(parents=True, exist_ok=True)
    day = dt.datetime.now(dt.UTC).date().isoformat()
    failed = []
    with tempfile.TemporaryDirectory() as scratch:  # a tuned-lens package some benchmarks read, removed after
        for name in names or list(benchmarks):
            command = f"{python} benchmarks/{benchmarks[name]}"
            print(f"{name}: {command}", flush=True)
            argv = shlex.split(f"benchmarks/{benchmarks[name]}")
            if "DIR" in argv:
                argv[argv.index("DIR")] = tuned_lens_package(Path(scratch))
            done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True)
            if done.returncode:
                failed.append(name)
                print(done.stderr[-2000:], file=sys.stderr)
                continue
            tmp = out / f".{name}.txt.tmp"
            tmp.write_text(f"# {command}   ({machine}, commit {commit}, {day})\n{done.stdout}", encoding="utf-8")
            os.replace(tmp, out / f"{name}.txt")
    if failed:
        print(f"failed (nothing kept for them): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="run benchmarks and keep their outputs")
    r.add_argument("out", type=Path)
    r.add_argument("names", nargs="*", help="which ones (default: all of the set)")
    r.add_argument("--set", choices=SETS, default="cpu", help="the CPU benchmarks or the CUDA ones")
    r.add_argument("--commit", default=None, help="the commit the header names (default: git's HEAD; give it "
                   "where the tree has no .git)")
    r.add_argument("--machine", default=None, help="how the header describes the machine (default: the CPU's "
                   "core count, or the GPU's name)")
    sub.add_parser("write", help="write the pages from the kept outputs")
    sub.add_parser("check", help="exit 1 when a page differs from the kept outputs; write nothing")
    args = parser.parse_args()
    if args.command == "record":
        commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                               text=True, check=True).stdout.strip()
        python = ".venv/bin/python" if args.set == "cpu" else "python"
        return record(args.out, args.names, args.machine or machine(args.set), SETS[args.set], python, commit)
    return write(check=args.command == "check")


if __name__ == "__main__":
    sys.exit(main())
