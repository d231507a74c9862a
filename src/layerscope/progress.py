"""Progress on long work, with an estimate of the time left: one updating bar on a terminal, a plain
progress line every ``LINE_EVERY_S`` seconds otherwise (work done sooner prints nothing).

    for batch in steps(batches, desc="extract smollm2-135m", unit="batch"):
        ...
    with stage("convert SmolLM2 to safetensors", estimate_s=35):   # one long call with no steps of its own
        convert(...)

A line reads ``extract smollm2-135m: 12/40 batches (30 s, about 1 min 10 s left)``: the time left is the
time per step so far times the steps to go (a stage's: its estimate minus the time spent, never below zero).

A run whose stderr is not a terminal (``make run > log``, CI, a notebook's captured output) still shows that
it is alive; ``LAYERSCOPE_PROGRESS=0`` silences both.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm.auto import tqdm

from .terminal import say, shown

T = TypeVar("T")
LINE_EVERY_S = 10.0
"""Without a terminal: the longest quiet stretch between two progress lines."""


def plural(word: str, count: int = 2) -> str:
    """``plural("batch")`` -> ``"batches"``, ``plural("pass")`` -> ``"passes"``, ``plural("query")`` ->
    ``"queries"``, ``plural("model")`` -> ``"models"``; ``word`` itself when ``count`` is 1."""
    if count == 1:
        return word
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def enabled() -> bool:
    return os.environ.get("LAYERSCOPE_PROGRESS", "1") != "0"


def steps(items: Iterable[T], desc: str, unit: str = "step", total: int | None = None,
          initial: int = 0) -> Iterator[T]:
    """Yield ``items``, showing progress as ``desc`` (a bar on a terminal, else a line now and then)."""
    total = total if total is not None else (len(items) if hasattr(items, "__len__") else None)  # type: ignore
    if not enabled():
        yield from items
        return
    if sys.stderr.isatty():
        yield from tqdm(items, desc=shown(desc), unit=unit, total=total, initial=initial, leave=False)
        return
    yield from _lines(items, desc, unit, total, initial)


def duration(seconds: float) -> str:
    """``duration(42)`` -> ``"42 s"``, ``duration(75)`` -> ``"1 min 15 s"``, ``duration(7260)`` -> ``"2 h 1 min"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def time_left(elapsed: float, done: int, total: int | None) -> float | None:
    """The seconds left at the pace so far: ``elapsed / done * (total - done)``; None when it cannot be told."""
    if total is None or done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


def _lines(items: Iterable[T], desc: str, unit: str, total: int | None, initial: int) -> Iterator[T]:
    start = last = time.perf_counter()
    done = initial
    of = f"/{total}" if total is not None else ""
    for item in items:
        yield item
        done += 1
        now = time.perf_counter()
        if now - last >= LINE_EVERY_S or (done == total and now - start >= LINE_EVERY_S):  # quick work: silent
            count = total if total is not None else done
            left = time_left(now - start, done - initial, None if total is None else total - initial)
            eta = f", about {duration(left)} left" if left is not None and done != total else ""
            say(f"{desc}: {done}{of} {plural(unit, count)} ({duration(now - start)}{eta})", err=True)
            last = now


@contextmanager
def stage(desc: str, estimate_s: float | None = None, tick_s: float = 0.5) -> Iterator[None]:
    """Show that one long call without steps of its own (a model conversion, a solver) is alive: on a terminal a bar
    over the estimated seconds, else a line every ``LINE_EVERY_S`` seconds with the time spent and, given
    ``estimate_s``, about how long is left. Work done within ``LINE_EVERY_S`` prints nothing without a terminal."""
    if not enabled():
        yield
        return
    stop = threading.Event()
    start = time.perf_counter()
    if sys.stderr.isatty():
        bar = tqdm(total=round(estimate_s) if estimate_s else None, desc=shown(desc), unit="s", leave=False,
                   bar_format="{desc}: {elapsed} elapsed, about {remaining} left|{bar}|" if estimate_s else None)

        def tick() -> None:
            while not stop.wait(tick_s):
                bar.n = min(round(time.perf_counter() - start), bar.total or 10**9)
                bar.refresh()
    else:
        bar = None

        def tick() -> None:
            while not stop.wait(LINE_EVERY_S):
                spent = time.perf_counter() - start
                left = ("" if not estimate_s else f", about {duration(estimate_s - spent)} left" if spent < estimate_s
                        else f", past its estimate of {duration(estimate_s)}")
                say(f"{desc}: {duration(spent)}{left}", err=True)

    ticker = threading.Thread(target=tick, name="layerscope-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        if bar is not None:
            bar.close()


def note(text: str) -> None:
    """One line on stderr about the work ahead (e.g. a plan and its estimated time), unless progress is off."""
    if enabled():
        say(text, err=True)
