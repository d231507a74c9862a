"""Write what one recorded `make run` found (its verdicts, headlines, figures and times) into the pages.

    .venv/bin/python tools/run_findings.py keep runs/<time> --times times.json   # [--lens DIR --grid FILE]
    .venv/bin/python tools/run_findings.py keep-tests ci.log                      # the tests' count and time from a log
    .venv/bin/python tools/run_findings.py write                                  # the pages again from what is kept
    .venv/bin/python tools/run_findings.py check   # exit 1 when a page differs (tests/docs/test_result_pages.py)

``keep`` copies every study's ``result.json`` of the run folder, its ``config.yaml``, one figure per study and a
screenshot of the top of its ``index.html`` (the verdict table, taken by headless Chromium) into
``docs/results/make-run/``, with ``made.json``: the commit, day and machine, and the times of the fresh clone's
``make setup`` and ``make run`` read from ``--times`` (a JSON file ``{"setup_s": ..., "run_s": ..., "commit":
..., "day": ..., "machine": ...}``, what ``/usr/bin/time`` measured; when the machine was busy, ``"idle":
{"run_s", "lens_s", "commit", "day"}`` adds the same command timed on an otherwise idle machine, which the pages
plan by). The tuned lens ``make run`` trained there is
read from ``docs/results/tuned-lens-smollm2/config.json``: ``--lens DIR`` (the lens folder in that clone's cache)
copies its ``config.json`` there (and its held-out figure, ``lens_eval.png``, into docs/figures/), and
``--grid FILE`` what ``layerscope lens "The capital of France is" --tuned auto`` printed through it, for
tools/lens_findings.py.

Every page block this writes lies between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers: ``times`` in
README.md and docs/getting-started.md, ``gallery`` in docs/index.md, ``made`` in docs/results.md and
``run-<study>`` on each study's page. Nothing in them is typed by hand; a page that states a result number outside
such a block fails tests/docs/test_result_pages.py.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pages import write_blocks

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "results" / "make-run"
LENS = ROOT / "docs" / "results" / "tuned-lens-smollm2" / "config.json"
STUDIES = ("divergence", "scaling", "phases", "anisotropy", "ablation", "atlas", "surgery", "probe")
FIGURE = {"divergence": "divergence.png", "scaling": "scaling.png", "phases": "phases.png",
          "anisotropy": "anisotropy_profile.png", "ablation": "ablation.png", "atlas": "atlas_profiles.png",
          "surgery": "surgery_layers_smollm2-135m.png", "probe": "probe_side_smollm2-135m.png"}
"""The figure of each study the gallery shows (a file the study writes into its folder)."""


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def cell(text: str) -> str:
    """A table cell: ``|`` escaped, line breaks as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")


# ---- keeping a run ---------------------------------------------------------------------------------------------

def keep(run: Path, times: Path, lens: Path | None = None, grid: Path | None = None) -> None:
    record = json.loads(times.read_text(encoding="utf-8"))
    if lens is not None:
        shutil.copyfile(lens / "config.json", LENS)
        shutil.copyfile(lens / "lens_eval.png", ROOT / "docs" / "figures" / "tuned_lens_smollm2-135m.png")
        lens_made = json.loads((LENS.parent / "made.json").read_text())
        lens_made["lens"] = {"day": record["day"], "commit": record["commit"],
                             "command": "make run (layerscope train-lens --model smollm2-135m)",
                             "folder": "fresh clone, empty LAYERSCOPE_CACHE", "machine": record["machine"]}
        lens_made.pop("make_run", None)
        (LENS.parent / "made.json").write_text(json.dumps(lens_made, indent=1) + "\n", encoding="utf-8")
    if grid is not None:
        shutil.copyfile(grid, LENS.parent / "grid.txt")
    missing = [s for s in STUDIES if not (run / s / "result.json").is_file()]
    if missing:
        sys.exit(f"{run} lacks {', '.join(missing)}: pass the folder `make run` wrote (runs/<time>)")
    old = json.loads((KEPT / "made.json").read_text()) if (KEPT / "made.json").exists() else {}
    shutil.rmtree(KEPT, ignore_errors=True)
    (KEPT / "figures").mkdir(parents=True)
    for study in STUDIES:
        (KEPT / study).mkdir()
        shutil.copyfile(run / study / "result.json", KEPT / study / "result.json")
        if study != "probe":  # the probe's figures are kept below, under the names probe_findings.py shows
            shutil.copyfile(run / study / FIGURE[study], KEPT / "figures" / f"{study}.png")
    shutil.copyfile(run / "config.yaml", KEPT / "config.yaml")
    from probe_findings import figure_name, shown

    for name in shown(json.loads((run / "probe" / "result.json").read_text()), "smollm2-135m"):
        shutil.copyfile(run / "probe" / figure_name(name), KEPT / "figures" / figure_name(name))
    screenshot(run / "index.html", KEPT / "figures" / "verdicts.png")
    made = {"folder": f"runs/{run.name}", "command": "make run", "commit": record["commit"], "day": record["day"],
            "machine": record["machine"], "setup_s": record["setup_s"], "run_s": record["run_s"]}
    if "idle" in record:  # the same command timed on an otherwise idle machine, when this run had company
        made["idle"] = record["idle"]
    if "tests" in old:
        made["tests"] = old["tests"]
    (KEPT / "made.json").write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")


def keep_tests(log: Path) -> None:
    """The count and wall time of the last pytest summary line in ``log`` (a fresh clone's ``.ci/run`` output),
    with the commit and day given in its first lines ``commit <sha>`` and ``day <date>``."""
    text = log.read_text(encoding="utf-8", errors="replace")
    # pytest's last line: "2706 passed, 1 skipped, 8 xfailed, 2 warnings in 2660.20s (0:44:20)", any outcome optional
    summary = re.findall(r"^=* ?(\d+ passed(?:, \d+ [a-z]+)*) in ([\d.]+)s", text, re.M)
    head = dict(re.findall(r"^(commit|day|total_s) (\S+)$", text, re.M))
    if not summary or not {"commit", "day"} <= set(head):
        sys.exit(f"{log}: no 'N passed ... in Xs' line, or no 'commit' / 'day' line; pass the .ci/run log")
    counts, seconds = summary[-1]
    outcomes = {word: int(n) for n, word in re.findall(r"(\d+) ([a-z]+)", counts)}
    if outcomes.get("failed") or outcomes.get("errors") or outcomes.get("error"):
        sys.exit(f"{log}: the tests did not pass ({counts}); keep the numbers of a passing run")
    passed, skipped = outcomes["passed"], outcomes.get("skipped", 0)
    made = json.loads((KEPT / "made.json").read_text())
    made["tests"] = {"passed": int(passed), "skipped": int(skipped or 0), "seconds": float(seconds),
                     "commit": head["commit"], "day": head["day"]}
    if "total_s" in head:
        made["tests"]["ci_s"] = float(head["total_s"])
    (KEPT / "made.json").write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")


def screenshot(page: Path, out: Path, width: int = 1280, height: int = 900) -> None:
    """The top ``width`` x ``height`` pixels of ``page`` as headless Chromium draws it (the verdict table)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("headless Chromium is missing: `make test` installs Debian's chromium package")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--user-data-dir={tmp}", f"--window-size={width},{height}",
                               f"--screenshot={out}", page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=120)
    if not out.is_file():
        sys.exit(f"Chromium made no screenshot of {page}: {done.stderr[-1000:]}")


# ---- the blocks ----------------------------------------------------------------------------------------------

def load_kept() -> tuple[dict, dict[str, object]]:
    """made.json, and each study's kept result (its summary and manifest; the table is not kept)."""
    sys.path.insert(0, str(ROOT / "src"))
    import pandas as pd

    from layerscope.study.result import StudyResult

    made = json.loads((KEPT / "made.json").read_text(encoding="utf-8"))
    results = {}
    for study in STUDIES:
        data = json.loads((KEPT / study / "result.json").read_text(encoding="utf-8"))
        results[study] = StudyResult(study=data["study"], config=data["config"], manifest=data["manifest"],
                                     summary=data["summary"], table=pd.DataFrame())
    return made, results


def figure(study: str) -> str:
    """The kept figure of ``study`` the pages show, relative to ``docs/results/make-run/``."""
    return "figures/probe_side_smollm2-135m.png" if study == "probe" else f"figures/{study}.png"


def models_line(results: dict) -> str:
    seen: dict[str, dict] = {}
    for result in results.values():
        for m in result.manifest["models"]:
            seen.setdefault(m["name"], m)
    from layerscope.models import exact_name  # a result written before manifests named models exactly

    return "; ".join(f"`{n}` = {m.get('exact') or exact_name(n)} (weights SHA-256 `{m['weights_hash'][:16]}`)"
                     for n, m in seen.items())


def times(made: dict, lens_s: float, link: str) -> str:
    run = made["run_s"]
    idle = made.get("idle")
    if idle:  # the recorded run had company: plan by the idle machine's time, and say what this run took
        text = (f"On a fresh clone `make run` takes **{minutes(made['setup_s'] + idle['run_s'])}** in all "
                f"([how]({link})): the set-up {minutes(made['setup_s'])} (once; {made['day']}), then, on an otherwise "
                f"idle 2-core CPU ({idle['day']}, commit {idle['commit']}), the tuned lens "
                f"{minutes(idle['lens_s'])} (once per cache) and the eight studies "
                f"{minutes(idle['run_s'] - idle['lens_s'])}. The run whose numbers these pages show ({made['day']}, "
                f"commit {made['commit']}) took {minutes(run)} after its set-up, on {made['machine']}.")
    else:
        text = (f"On a fresh clone ({made['machine']}, {made['day']}, commit {made['commit']}; [how]({link})), "
                f"`make run` took **{minutes(made['setup_s'] + run)}** in all: the set-up "
                f"{minutes(made['setup_s'])} (once), the tuned lens {minutes(lens_s)} (once per cache) and the "
                f"eight studies {minutes(run - lens_s)}.")
    tests = made.get("tests")
    if tests:
        text += (f" `make test` ran {tests['passed']:,} tests in **{minutes(tests['seconds'])}** after its set-up "
                 f"({tests['day']}, commit {tests['commit']}"
                 + (f"; `.ci/run`, with set-up, lint and the docs, {minutes(tests['ci_s'])}" if "ci_s" in tests else "")
                 + ").")
    return text


def study_block(study: str, result, made: dict) -> str:
    from layerscope.run.pages import section

    s = section(KEPT / study, KEPT, result)  # the verdict lines and rows index.html shows
    lines = [f"From the recorded `make run` ({made['day']}, commit {made['commit']}; [how these were made]"
             f"(../results.md)), on {models_line({study: result})}. Its verdict lines:", ""]
    lines += [f"- {line}" for line in s.headline]
    lines += ["", "| model | claim | status | key number | checks that flip it |", "| --- | --- | --- | --- | --- |"]
    for _study, model, claim, status, key, flips in s.verdicts:
        lines.append(f"| {cell(model)} | {cell(claim)} | {cell(status)} | {cell(key)} | "
                     f"{cell(', '.join(flips) or 'none')} |")
    if study != "probe":  # the probe's figures stand under its per-contrast table (tools/probe_findings.py)
        lines += ["", f"![{study}: the figure of the recorded run](../results/make-run/{figure(study)})"]
    return "\n".join(lines)


def gallery(made: dict) -> str:
    lines = [f"What `make run` gives: its page opens with this table of every study's verdicts (the top of "
             f"`runs/<time>/index.html` from the recorded run of {made['day']}, as headless Chromium draws it; "
             "[how it was made](results.md)), then one section per study with its figures and report.", "",
             "![The verdict table at the top of make run's index.html](results/make-run/figures/verdicts.png)", "",
             "One figure per study from the same run:", ""]
    for study in STUDIES:
        lines += [f"[![{study}](results/make-run/{figure(study)})](studies/{study}.md)", ""]
    return "\n".join(lines).rstrip("\n")


def made_page(made: dict, results: dict, lens_s: float) -> str:
    first = results[STUDIES[0]].manifest
    versions = ", ".join(f"{k} {v}" for k, v in first["versions"].items())
    data = {}
    for result in results.values():
        d = result.manifest.get("dataset") or {}
        if d.get("hash"):
            source = str(d.get("source"))
            data.setdefault(source.rsplit("/", 1)[-1], d["hash"])  # the bundled file's name, not the clone's path
    lines = [f"Every result number on these pages comes from one run of `{made['command']}` on a fresh clone of "
             f"commit {made['commit']} ({made['day']}), with an empty model and activation cache, on "
             f"{made['machine']}; its folder was `{made['folder']}`. `tools/run_findings.py` keeps each study's "
             "`result.json`, the suite's `config.yaml`, one figure per study and a screenshot of the verdict table "
             "in `docs/results/make-run/`, and writes every block of numbers from them.", "",
             f"- Models: {models_line(results)}.",
             f"- Seed {first['seed']}; library versions: {versions}.",
             "- Data (SHA-256): " + "; ".join(f"`{src}` `{h[:16]}`" for src, h in data.items()) + ".",
             f"- {times(made, lens_s, '#how-these-numbers-were-made')}"]
    return "\n".join(lines)


def blocks() -> dict[str, dict[str, str]]:
    made, results = load_kept()
    lens_s = json.loads(LENS.read_text(encoding="utf-8"))["layerscope"]["seconds"]["wall"]
    out = {"README.md": {"times": times(made, lens_s, "docs/results.md")},
           "docs/getting-started.md": {"times": times(made, lens_s, "results.md")},
           "docs/index.md": {"gallery": gallery(made)},
           "docs/results.md": {"made": made_page(made, results, lens_s)}}
    for study in STUDIES:
        out[f"docs/studies/{study}.md"] = {f"run-{study}": study_block(study, results[study], made)}
    return out


def write(check: bool) -> int:
    stale = write_blocks(ROOT, blocks(), check)
    if check and stale:
        print(f"not what {KEPT.relative_to(ROOT)} gives: {', '.join(stale)}; run tools/run_findings.py write",
              file=sys.stderr)
    code = int(bool(stale) and check)
    for tool in ("probe_findings.py", "lens_findings.py"):  # the blocks they write come from the same run
        code |= subprocess.run([sys.executable, str(ROOT / "tools" / tool), *(["--check"] if check else [])],
                               timeout=120).returncode
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keep", help="keep a make run folder's results, then write the pages")
    k.add_argument("run", type=Path)
    k.add_argument("--times", type=Path, required=True)
    k.add_argument("--lens", type=Path, help="the tuned lens folder make run trained (in that clone's cache)")
    k.add_argument("--grid", type=Path, help="`layerscope lens ... --tuned auto`'s output through that lens")
    t = sub.add_parser("keep-tests", help="keep the tests' count and time from a .ci/run log, then write the pages")
    t.add_argument("log", type=Path)
    sub.add_parser("write", help="write the pages from what is kept")
    sub.add_parser("check", help="exit 1 when a page differs from what is kept; write nothing")
    args = parser.parse_args()
    if args.command == "keep":
        keep(args.run, args.times, args.lens, args.grid)
    elif args.command == "keep-tests":
        keep_tests(args.log)
    return write(check=args.command == "check")


if __name__ == "__main__":
    sys.exit(main())
