"""Progress lines without a terminal: the unit is spelled in the plural properly ("batches", "passes")."""

import pytest

from layerscope import progress
from layerscope.progress import plural, steps


@pytest.mark.parametrize("word, plural_form", [
    ("batch", "batches"), ("pass", "passes"), ("box", "boxes"), ("flash", "flashes"), ("waltz", "waltzes"),
    ("model", "models"), ("task", "tasks"), ("step", "steps"), ("configuration", "configurations"),
    ("query", "queries"), ("day", "days"), ("key", "keys"),
])
def test_plural(word, plural_form):
    assert plural(word) == plural_form and plural(word, 2) == plural_form and plural(word, 0) == plural_form
    assert plural(word, 1) == word


@pytest.mark.parametrize("unit, total, line", [
    ("batch", 3, "extract m: 3/3 batches"),
    ("pass", 4, "ablation m: 4/4 passes"),
    ("model", 1, "run: 1/1 model"),
])
def test_progress_lines_spell_the_unit_in_the_plural(monkeypatch, capsys, unit, total, line):
    clock = iter(range(0, 1000, 20))  # every step takes 20 s: a line after each
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "1")
    desc = line.split(":")[0]
    assert list(steps(range(total), desc=desc, unit=unit)) == list(range(total))
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == total and printed[-1].startswith(line + " (")
    assert "batchs" not in "".join(printed) and "passs" not in "".join(printed)
