"""The speed pages (docs/benchmarks.md, docs/engine.md) show the benchmark outputs kept in benchmarks/results/, one
recorded session, as tools/bench_findings.py writes them; tests/test_result_pages.py scans their prose too.

    .venv/bin/python -m pytest -q tests/test_bench_pages.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import bench_findings  # noqa: E402


def test_the_speed_pages_are_what_the_kept_outputs_give():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_findings.py"), "check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_kept_cpu_outputs_are_one_session_of_every_benchmark():
    kept = ROOT / "benchmarks" / "results" / "cpu"
    assert sorted(p.stem for p in kept.glob("*.txt")) == sorted(bench_findings.CPU)
    sessions = set()
    for name, command in bench_findings.CPU.items():
        made = bench_findings.header(kept / f"{name}.txt")
        assert made["command"] == f".venv/bin/python benchmarks/{command}"
        assert (ROOT / "benchmarks" / command.split()[0]).is_file()
        sessions.add((made["day"], made["machine"]))
        assert bench_findings.output(kept / f"{name}.txt") != [""], f"{name}: the benchmark printed nothing"
        if (ROOT / ".git").exists():  # the code that printed it is in this history
            ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", made["commit"], "HEAD"], cwd=ROOT)
            assert ancestor.returncode == 0, f"{name} names commit {made['commit']}, not in HEAD's history"
    assert len(sessions) == 1, f"the kept outputs come from more than one session: {sorted(sessions)}"


def test_every_block_of_the_pages_is_written_and_every_output_is_shown():
    for page, names in bench_findings.PAGES.items():
        text = (ROOT / page).read_text(encoding="utf-8")
        for name in names:
            assert text.count(f"<!-- bench-{name}:start -->") == 1, f"{page} lacks (or repeats) bench-{name}"
    shown = {name for names in bench_findings.PAGES.values() for name in names}
    assert shown >= set(bench_findings.CPU) | set(bench_findings.GPU)


@pytest.fixture
def results(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "gpu").mkdir()
    return tmp_path


def kept(folder: Path, name: str, lines: str, commit: str = "abc1234") -> None:
    (folder / f"{name}.txt").write_text(
        f"# .venv/bin/python benchmarks/x.py   (2-core CPU, machine otherwise idle, commit {commit}, 2026-01-02)\n"
        f"{lines}\n\n", encoding="utf-8")


def test_a_block_is_the_output_whole_under_its_command_and_session(results):
    kept(results / "cpu", "one", "\nfirst line\n  ratio 1.23x   (target <= 1.10x)")
    body = bench_findings.block("one", results / "cpu", {"one": "x.py"}, optional=False)
    assert body == ("`.venv/bin/python benchmarks/x.py` on a 2-core CPU, machine otherwise idle "
                    "(commit abc1234, 2026-01-02):\n\n```text\nfirst line\n  ratio 1.23x   (target <= 1.10x)\n```")


def test_the_targets_table_has_every_line_that_states_a_target_and_nothing_else(results, monkeypatch):
    monkeypatch.setattr(bench_findings, "SETS", {"cpu": {"a": "a.py", "b": "b.py"}, "gpu": {"g": "g.py"}})
    kept(results / "cpu", "a", "no\nspeed 2.00x (target >= 1.5x)\nx | y target")
    kept(results / "cpu", "b", "nothing here")
    assert bench_findings.targets(results).split("\n") == [
        "| benchmark | what it printed |", "| --- | --- |",
        "| `a` | `speed 2.00x (target >= 1.5x)` |", "| `a` | `x \\| y target` |"]


def test_a_missing_cpu_output_names_the_command_that_records_it_and_a_gpu_one_says_not_recorded(results):
    with pytest.raises(SystemExit, match="record .* one"):
        bench_findings.block("one", results / "cpu", {"one": "x.py"}, optional=False)
    assert bench_findings.block("g", results / "gpu", {"g": "g.py --profile"}, optional=True) == (
        "`python benchmarks/g.py --profile`: not recorded yet.")


def test_a_kept_output_without_its_header_is_refused(results):
    (results / "cpu" / "one.txt").write_text("ratio 1.0x\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="first line"):
        bench_findings.header(results / "cpu" / "one.txt")


def test_record_keeps_each_output_under_its_header_and_nothing_of_a_failed_benchmark(tmp_path, monkeypatch):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "ok.py").write_text("import sys\nprint('ratio', sys.argv[1:])\n")
    (tmp_path / "benchmarks" / "bad.py").write_text("print('half')\nraise SystemExit(3)\n")
    monkeypatch.setattr(bench_findings, "ROOT", tmp_path)
    out = tmp_path / "kept"
    rc = bench_findings.record(out, [], "a test machine", {"ok": "ok.py --n 2", "bad": "bad.py"}, "py", "abc1234")
    assert rc == 1
    assert sorted(p.name for p in out.iterdir()) == ["ok.txt"]
    made = bench_findings.header(out / "ok.txt")
    assert (made["command"], made["machine"], made["commit"]) == ("py benchmarks/ok.py --n 2", "a test machine",
                                                                 "abc1234")
    assert bench_findings.output(out / "ok.txt") == ["ratio ['--n', '2']"]
    with pytest.raises(SystemExit, match="no benchmark named nope"):
        bench_findings.record(out, ["nope"], "m", {"ok": "ok.py"}, "py", "abc1234")
