"""Names that moved keep working until 0.5.0 with a DeprecationWarning that names their new place: the engine's
flat module paths of 0.3 (now five rooms, ``layerscope.engine._old_paths``) and the runner's names that
``layerscope.studies`` once held (now ``layerscope.run``). Each old name gives the very object at its new place."""

from __future__ import annotations

import importlib
import warnings

import pytest

from layerscope.engine._old_paths import MOVED

# Written out by hand, not read from MOVED: where one name of each old module lives now.
EXAMPLES = {
    "batching": ("forward.batching", "plan_batches"), "guards": ("forward.guards", "check_finite"),
    "capture": ("forward.capture", "Capture"), "head": ("forward.head", "HeadCapture"),
    "pooling": ("forward.pooling", "POOLINGS"), "massive": ("forward.massive", "massive_mask"),
    "pipeline": ("forward.pipeline", "Writer"), "extract": ("forward.extract", "extract"),
    "activations": ("forward.activations", "Activations"), "tokens": ("forward.tokens", "token_states"),
    "probing": ("forward.probing", "probe"), "store": ("cache.store", "LayerStore"),
    "store_files": ("cache.files", "pwrite_all"), "store_views": ("cache.views", "StoreSource"),
    "entry": ("cache.entry", "Layout"), "journal": ("cache.journal", "digest"),
    "layers": ("cache.layers", "LayerStack"),
    "lens": ("lenses.logit", "layer_logits"), "lens_prompt": ("lenses.prompt", "lens"),
    "lens_rows": ("lenses.logit_rows", "final_terms"), "tuned_lens": ("lenses.tuned", "TunedLens"),
    "tuned_lens_io": ("lenses.tuned_io", "LensError"), "tuned_lens_train": ("lenses.tuned_train", "OLD_RECIPE"),
    "tuned_lens_fit": ("lenses.tuned_fit", "least_squares_start"),
    "tuned_lens_rows": ("lenses.tuned_rows", "cache_rows"),
    "tuned_lens_split": ("lenses.tuned_split", "PrefixTrie"),
    "tuned_lens_eval": ("lenses.tuned_eval", "evaluate_lenses"),
    "tuned_lens_cache": ("lenses.tuned_cache", "lens_folder"), "atlas": ("atlas.stream", "atlas_pass"),
    "atlas_sums": ("atlas.sums", "PassSums"), "atlas_moments": ("atlas.moments", "Moments"),
    "atlas_entropy": ("atlas.entropy", "prompt_entropies"), "atlas_layout": ("atlas.layout", "Layout"),
    "massive_profile": ("atlas.massive_profile", "MassiveProfile"),
    "surgery": ("interventions.surgery", "Intervention"),
    "surgery_run": ("interventions.surgery_run", "measure_interventions"),
    "steering": ("interventions.steering", "Steering"), "edits": ("interventions.edits", "Edit"),
    "interventions": ("interventions.edit_scores", "Interventions"),
    "transitions": ("interventions.transitions", "block_transitions"), "scoring": ("interventions.scoring", "Scorer"),
    "prefix": ("interventions.prefix", "stand_ins"), "prefix_plan": ("interventions.prefix_plan", "plan_passes"),
}


def test_every_module_of_the_flat_engine_is_mapped():
    """The 43 modules of 0.3's engine folder (listed by hand from its tree) each have a new place."""
    assert set(MOVED) == set(EXAMPLES) and len(EXAMPLES) == 43


@pytest.mark.parametrize("old", sorted(EXAMPLES))
def test_an_old_engine_path_gives_the_new_object_with_a_warning_naming_it(old):
    new, name = EXAMPLES[old]
    target = getattr(importlib.import_module(f"layerscope.engine.{new}"), name)
    with pytest.warns(DeprecationWarning, match=rf"moved to layerscope\.engine\.{new}\.{name} .*0\.5\.0") as caught:
        got = getattr(importlib.import_module(f"layerscope.engine.{old}"), name)
    assert got is target
    deprecations = [w for w in caught if w.category is DeprecationWarning]
    assert deprecations and all(w.filename == __file__ for w in deprecations)  # at the line that asked


def test_old_tuned_lens_path_still_hands_out_training_and_evaluation():
    from layerscope.engine.lenses.tuned_eval import evaluate_lenses
    from layerscope.engine.lenses.tuned_train import train_tuned_lens

    with pytest.warns(DeprecationWarning, match="tuned_train"):
        from layerscope.engine.tuned_lens import train_tuned_lens as old_train
    with pytest.warns(DeprecationWarning, match="tuned_eval"):
        from layerscope.engine.tuned_lens import evaluate_lenses as old_eval
    assert (old_train, old_eval) == (train_tuned_lens, evaluate_lenses)


def test_importing_the_old_extract_module_leaves_the_extract_function_in_place():
    import layerscope.engine
    from layerscope.engine.forward.extract import extract

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImportWarning)
        old = importlib.import_module("layerscope.engine.extract")
    assert old is not extract and layerscope.engine.extract is extract
    with pytest.warns(DeprecationWarning, match="forward.extract"):
        assert old.extract is extract


def test_new_paths_and_unknown_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from layerscope.engine.atlas import stream  # a room's own module, not a forwarded name
        from layerscope.engine.cache.store import LayerStore  # noqa: F401
        from layerscope.engine.interventions import surgery  # noqa: F401
    assert stream.__name__ == "layerscope.engine.atlas.stream"
    with pytest.raises(ImportError, match="no_such_name"):
        from layerscope.engine.store import no_such_name  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("layerscope.engine.no_such_module")


@pytest.mark.parametrize("name", ["get_study", "run_study", "load_run", "SuiteResult", "studies"])
def test_the_runner_names_layerscope_studies_once_held(name):
    import layerscope.run

    with pytest.warns(DeprecationWarning, match=rf"from layerscope\.run import {name}\b"):
        old = getattr(importlib.import_module("layerscope.studies"), name)
    assert old is getattr(layerscope.run, name)


def test_layerscope_studies_keeps_its_own_names_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from layerscope.studies import (  # noqa: F401
            ConfigError,
            Study,
            StudyConfig,
            divergence,  # a study package, not a moved name
        )
    assert divergence.__name__ == "layerscope.studies.divergence"
