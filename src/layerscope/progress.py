"""Progress on long work: a bar on a terminal, a progress line every ``LINE_EVERY_S``
seconds otherwise (work done sooner prints nothing).

    for batch in steps(batches, desc="extract smollm2-135m", unit="batch"):
        ...

A run whose stderr is not a terminal (``make run > log``, CI, a notebook's captured output) still shows that
it is alive; ``LAYERSCOPE_PROGRESS=0`` silences both.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

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
        yield from tqdm(items, desc=desc, unit=unit, total=total, initial=initial, leave=False)
        return
    yield from _lines(items, desc, unit, total, initial)


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
            print(f"{desc}: {done}{of} {plural(unit, count)} ({now - start:.0f} s)", file=sys.stderr, flush=True)
            last = now


def note(text: str) -> None:
    """One line on stderr about the work ahead (e.g. a plan and its estimated time), unless progress is off."""
    if enabled():
        print(text, file=sys.stderr, flush=True)
