"""Progress with an estimate of the time left: the pace so far times the steps to go, and a stage's estimate."""

import threading

import pytest

from layerscope import progress
from layerscope.progress import duration, stage, steps, time_left


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (42.4, "42 s"), (59.6, "1 min 0 s"), (75, "1 min 15 s"),
                                           (3599, "59 min 59 s"), (7260, "2 h 1 min"), (-3, "0 s")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_time_left_is_the_pace_so_far_times_the_steps_to_go():
    assert time_left(30.0, 3, 10) == pytest.approx(70.0)  # 10 s a step, 7 to go
    assert time_left(30.0, 10, 10) == 0.0
    assert time_left(30.0, 0, 10) is None and time_left(30.0, 3, None) is None


def test_lines_carry_the_time_left(monkeypatch, capsys):
    clock = iter(range(0, 1000, 20))  # start at 0, then 20 s per step: a line after each
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "1")
    assert list(steps(range(4), desc="atlas m", unit="batch")) == [0, 1, 2, 3]
    lines = capsys.readouterr().err.splitlines()
    # after step k of 4: 20k s spent, 20 s a step, 20 (4 - k) s left; the last line has nothing left to tell
    assert lines == ["atlas m: 1/4 batches (20 s, about 1 min 0 s left)",
                     "atlas m: 2/4 batches (40 s, about 40 s left)",
                     "atlas m: 3/4 batches (1 min 0 s, about 20 s left)",
                     "atlas m: 4/4 batches (1 min 20 s)"]


def test_lines_after_a_resume_count_the_pace_of_this_run_only(monkeypatch, capsys):
    clock = iter(range(0, 1000, 20))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "1")
    list(steps(range(2), desc="extract m", unit="batch", total=10, initial=8))  # 8 cached, 2 to run
    assert capsys.readouterr().err.splitlines()[0] == "extract m: 9/10 batches (20 s, about 20 s left)"


def test_stage_prints_the_time_spent_and_left_without_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "1")
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.01)
    clock = iter([0.0, 12.0, 50.0])  # the start, then two ticks: at 12 s, and at 50 s (past the estimate)
    ticked = threading.Event()

    def now():
        value = next(clock, None)
        if value is None:
            ticked.set()
            return 50.0
        return value

    monkeypatch.setattr(progress.time, "perf_counter", now)
    with stage("convert m.gguf", estimate_s=30):
        assert ticked.wait(5)
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == ["convert m.gguf: 12 s, about 18 s left", "convert m.gguf: 50 s, past its estimate of 30 s"]


def test_stage_is_silent_for_quick_work_and_when_progress_is_off(monkeypatch, capsys):
    monkeypatch.setattr(progress.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "1")
    with stage("quick", estimate_s=5):
        pass
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "0")
    with stage("off", estimate_s=5):
        pass
    assert capsys.readouterr().err == ""
