"""The category minimum: every pair study needs 4 categories, also once --drop-category has removed one."""

import json

import numpy as np
import pytest

from layerscope import DatasetError, load_pairs
from layerscope.data.pairs import MIN_CATEGORIES, check_categories
from layerscope.run import run_study
from layerscope.run.suite import check_inputs
from layerscope.stats import fisher_z_ci, pearson
from layerscope.studies.shared.categories import study_pairs
from layerscope.study import StudyConfig
from layerscope.study.config import ConfigError

PAIR_STUDIES = ("divergence", "scaling", "phases")


def dataset(tmp_path, n_categories: int, name: str = "pairs.json") -> str:
    names = [f"topic{c}" for c in range(n_categories)]
    data = {n: {"pairs": [[f"{n} is large, {i}.", f"{n} is small, {i}."] for i in range(3)]} for n in names}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_the_minimum_is_where_a_category_level_r_and_its_interval_first_mean_something():
    rng = np.random.default_rng(0)
    for _ in range(20):  # over 2 points r is +1 or -1 whatever the data
        r, _ = pearson(rng.normal(size=2), rng.normal(size=2))
        assert abs(r) == pytest.approx(1.0)
    assert all(np.isnan(fisher_z_ci(0.5, n)).all() for n in (2, 3))  # no interval below 4
    assert np.isfinite(fisher_z_ci(0.5, MIN_CATEGORIES)).all() and MIN_CATEGORIES == 4


@pytest.mark.parametrize("n", [1, 2, 3])
def test_fewer_than_four_categories_is_a_dataset_error_naming_the_file_and_its_categories(tmp_path, n):
    path = dataset(tmp_path, n)
    pairs = load_pairs(path)  # the loader itself reads any number (extract needs no categories)
    names = ", ".join(f"'topic{c}'" for c in range(n))
    word = "category" if n == 1 else "categories"
    with pytest.raises(DatasetError) as error:
        check_categories(pairs)
    assert str(error.value) == (
        f"{path}: {n} {word} ({names}); the pair studies (divergence, scaling, phases) need at least 4 categories: "
        "a correlation over 2 category means is +1 or -1 whatever the data, and with fewer than 4 it has no "
        "confidence interval, so add categories of pairs to the dataset")
    assert check_categories(load_pairs(dataset(tmp_path, 4, "four.json"))).n_pairs == 12


@pytest.mark.parametrize("study", PAIR_STUDIES)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_pair_study_refuses_too_few_categories_before_any_model_loads(tmp_path, monkeypatch, study, n):
    from layerscope.study import per_model as runner

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    config = StudyConfig(study=study, models=("smollm2-135m",), dataset=dataset(tmp_path, n))
    for check in (run_study, check_inputs):  # the study itself, and the check a suite and the CLI run first
        with pytest.raises(DatasetError, match=f": {n} categor.*need at least 4 categories"):
            check(config)


@pytest.mark.parametrize("study", ["divergence", "phases"])
def test_drop_category_must_leave_four(tmp_path, monkeypatch, study):
    from layerscope.study import per_model as runner

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    config = StudyConfig(study=study, models=("smollm2-135m",), dataset=dataset(tmp_path, 4), drop_category="topic1")
    for check in (run_study, check_inputs):
        with pytest.raises(ConfigError, match=r"--drop-category 'topic1' leaves 3 categories of .*pairs\.json; the "
                                              r"pair studies .* need at least 4 categories.*so drop none or add"):
            check(config)
    five = dataset(tmp_path, 5, "five.json")
    assert [c.name for c in study_pairs(five, "topic1").categories] == [f"topic{c}" for c in range(5)]
