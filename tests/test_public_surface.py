"""The documented API is what ``__all__`` says: every name of ``layerscope``, ``layerscope.study`` and
``layerscope.run`` resolves (each is imported on first use), and ``import layerscope`` alone imports neither the
studies nor torch. Run in a fresh interpreter, so nothing an earlier test imported hides a missing import."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
import layerscope
light = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy", "pandas")
               or m.startswith(("layerscope.studies", "layerscope.run", "layerscope.engine")))
import layerscope.run, layerscope.study
missing = {pkg.__name__: [n for n in pkg.__all__ if getattr(pkg, n, None) is None]
           for pkg in (layerscope, layerscope.study, layerscope.run)}
kinds = {n: type(getattr(layerscope.study, n)).__name__ for n in ("manifest", "register_study", "Study")}
print(json.dumps({"light": light, "missing": missing, "kinds": kinds}))
"""


def test_every_public_name_resolves_and_import_layerscope_stays_light():
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["light"] == []
    assert found["missing"] == {"layerscope": [], "layerscope.study": [], "layerscope.run": []}
    # a public name never resolves to the sub-module of the same name
    assert found["kinds"] == {"manifest": "function", "register_study": "function", "Study": "ABCMeta"}


# The documented public surface, written out by hand: a name added, dropped or renamed in one of these __all__
# fails here until this list, CHANGELOG.md and (for a move) a deprecation shim say so.
SURFACE = {
    "layerscope": [
        "Activations", "DEFAULT_MODEL", "DatasetError", "ExtractSettings", "ExtractionError", "Intervention",
        "LayerscopeError", "LoadedModel", "ModelInfo", "ModelLoadError", "OutputError", "POOLINGS", "PairDataset",
        "Study", "StudyConfig", "StudyResult", "SuiteResult", "TunedLens", "ZOO", "__version__", "extract",
        "get_study", "intervened", "lens", "load_model", "load_pairs", "load_run", "measure_interventions", "probe",
        "register_study", "run_study", "steer", "train_tuned_lens", "write_result",
    ],
    "layerscope.study": [
        "ConfigError", "ModelRun", "NOT_ASSESSABLE", "NonFiniteError", "PairSettings", "STATUSES", "Settings",
        "Study", "StudyConfig", "StudyResult", "TABLE_COLUMNS", "Verdict", "check_entry", "check_rows",
        "check_values", "dataset_entry", "defined", "each_model", "key_text", "layer_row", "make_table", "manifest",
        "model_entry", "register_study", "robustness", "setting", "status_of",
    ],
    "layerscope.run": [
        "SuiteResult", "get_study", "listing", "load_run", "reload_plugins", "run_study", "run_suite", "studies",
        "study_class", "study_html", "study_origin", "write_result",
    ],
}


def test_the_public_surface_is_the_documented_list():
    import importlib

    found = {name: sorted(importlib.import_module(name).__all__) for name in SURFACE}
    assert found == {name: sorted(names) for name, names in SURFACE.items()}
