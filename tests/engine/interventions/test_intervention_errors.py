"""Bad input to the rank-one edits and skips refused before any pass, one line naming the fix each; an edit that
overflows an NLL is an extraction error naming the text (the edits' numbers: test_interventions.py)."""

import numpy as np
import pytest

import tiny
from layerscope.engine.interventions.edit_scores import Edit, Interventions, add, oblique, project_out, set_component
from layerscope.errors import ExtractionError

L = 4
D = 32  # tiny models' hidden size


def test_bad_inputs_raise_one_line_naming_the_fix_before_any_pass():
    lm = tiny.tiny_lm("llama", n_layers=L)
    texts = tiny.TEXTS[:4]
    iv = Interventions(lm, texts)
    good = add(np.zeros((4, D)))
    nan = np.zeros((4, D))
    nan[2, 5] = np.nan
    bad = [
        (lambda: iv.run(-1, [good]), rf"hidden states 0\.\.{L}"),
        (lambda: iv.run(L + 1, [good]), rf"hidden states 0\.\.{L}"),
        (lambda: iv.run(1.5, [good]), "whole hidden-state number"),
        (lambda: iv.run(1, [good, add(np.zeros((4, D + 1)))]), rf"edit 1: a has shape \(4, {D + 1}\).*\(4, {D}\)"),
        (lambda: iv.run(1, [Edit(np.zeros((3, D)), *[np.zeros((4, D))] * 3)]), r"need \(4, 32\): one row per text"),
        (lambda: iv.run(1, [add(nan)]), r"rows \[2\] of c hold NaN or inf; give finite values"),
        (lambda: iv.run(1, [oblique(nan, nan + 1, np.zeros((4, D)))]), "NaN or inf; give finite"),
        (lambda: iv.run(1, ["add"]), "not an Edit: build one with add"),
        (lambda: iv.run(2, [good], capture=(1,)), rf"capture states in 2\.\.{L}"),
        (lambda: iv.run(2, [good], capture=(L + 1,)), rf"capture state {L + 1} is out of range"),
        (lambda: iv.run(2, [good], edits_per_pass=0), "give a whole number >= 1"),
        (lambda: iv.skip(L), rf"decoder blocks 0\.\.{L - 1}; pick one"),
        (lambda: iv.skip(-1), rf"decoder blocks 0\.\.{L - 1}; pick one"),
        (lambda: Interventions(lm, texts, partners=[1, 0, 3]), "one per text"),
        (lambda: Interventions(lm, texts, partners=[1, 0, 4, -1]), r"partners\[2\] = 4 is out of range"),
        (lambda: Interventions(lm, texts, partners=[1, 2, -1, -1]), r"not mutual.*set partners\[1\] = 0"),
        (lambda: Interventions(lm, texts, partners=[0, -1, -1, -1]), "its own partner"),
        (lambda: Interventions(lm, texts, partners=[0.5, 1, 2, 3]), "whole numbers"),
        (lambda: project_out(2 * np.eye(4, D)), "not unit vectors.*divide each row by its norm"),
        (lambda: set_component(np.eye(4, D), np.zeros(3)), r"one target per row, shape \(4,\)"),
        (lambda: add(np.zeros(D)), r"must be \(n, d\).*np\.tile"),
    ]
    for call, message in bad:
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value), message
    assert iv.blocks_run == 0 and iv.kept_bytes == 0
    assert iv.run(1, []).shape == (0, 4) and iv.blocks_run == 0


def test_an_edit_that_overflows_is_an_extraction_error_naming_the_text():
    lm = tiny.tiny_lm("llama", n_layers=L)
    iv = Interventions(lm, tiny.TEXTS[:3])
    huge = np.zeros((3, D))
    huge[1] = 1e30  # finite, but l (r . h) overflows float32 for text 1
    nothing = np.zeros((3, D))
    with pytest.raises(ExtractionError, match=r'NaN or inf NLL.* text 1 \("A warm breeze'):
        iv.run(2, [oblique(huge, huge, nothing)])
    assert np.isfinite(iv.run(2, [add(np.zeros((3, D)))])).all()
