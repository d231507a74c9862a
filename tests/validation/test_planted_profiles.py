"""The validation card's planted profiles: the inserted-identity profiles derived from the unplanted pass equal a
real pass of the planted copy, and profiles with no change are a straight line plus noise in the span of the
resamples' deviations."""

import sys
from pathlib import Path

import numpy as np
import pytest

from layerscope.engine.atlas.stream import atlas_pass
from layerscope.models import LoadedModel
from layerscope.plant import inserted_identity
from layerscope.studies.atlas.resample import draw_weights, resampled_profiles
from layerscope.validation.boundaries import identity_profiles, null_profiles

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tiny  # noqa: E402

TEXTS = tiny.CORPUS + tiny.TEXTS


def profiles_of(lm):
    p = atlas_pass(lm, TEXTS, progress=False)
    return resampled_profiles(p, draw_weights(p.n_texts, 8, 3), 0, "mle", 3)


@pytest.fixture(scope="module")
def tiny_lm():
    tok = tiny.tokenizer(False)
    return LoadedModel.wrap(tiny.model("llama", len(tok), 6), tok, name="tiny")


@pytest.mark.parametrize("at, k", [(2, 3), (0, 2), (6, 2)])
def test_derived_identity_profiles_equal_a_real_pass_of_the_planted_copy(tiny_lm, at, k):
    derived = identity_profiles(profiles_of(tiny_lm), at, k)
    real = profiles_of(inserted_identity(tiny_lm, at, k))
    assert derived.keys() == real.keys()
    for name, (layers, values) in real.items():
        assert derived[name][0] == layers
        tol = 1e-3 if name == "angular_distance" else 1e-5  # arccos near 1 is ill-conditioned in float32
        assert np.nanmax(np.abs(derived[name][1] - values)) <= tol, name


def test_profiles_with_no_change_are_a_line_plus_noise_the_resamples_could_make():
    rng = np.random.default_rng(0)
    x = np.arange(12.0)
    base = np.vstack([2 * x + 5 * (x >= 6)] + [2 * x + 5 * (x >= 6) + rng.normal(size=12) for _ in range(30)])
    (layers, values), = null_profiles({"m": (list(range(12)), base)}, np.random.default_rng(1)).values()
    slope, intercept = np.polyfit(x, base[0], 1)  # the jump is gone: the full data's straight line
    noise = values - (intercept + slope * x)
    deviations = base[1:] - base[1:].mean(axis=0)
    coef, *_ = np.linalg.lstsq(deviations.T, noise.T, rcond=None)
    assert np.abs(deviations.T @ coef - noise.T).max() < 1e-8  # every row's noise is a mix of the deviations
    assert values.shape == base.shape and not np.allclose(noise[0], noise[1])
