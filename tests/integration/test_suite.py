"""The suite the README's first command runs, `layerscope run`, on the real default models, then the page it writes
in headless Chromium. (`make run` adds ``--tuned-lens auto`` after training SmolLM2's tuned lens once, 30 min on
this CPU: the atlas with a tuned lens is tested on tiny models and in the atlas page's example.)"""

import json

import pytest

from browser import render
from layerscope.data import load_pairs
from layerscope.run.config_file import SUITE

pytestmark = pytest.mark.integration


def test_layerscope_run_writes_every_study_and_a_page_chromium_renders(real_suite):
    folder, done = real_suite.folder, real_suite
    assert {p.name for p in folder.iterdir()} == {*SUITE, "config.yaml", "index.html", ".layerscope.json"}
    models = {name: json.loads((folder / name / "result.json").read_text())["config"]["models"] for name in SUITE}
    assert models == {**{name: ["smollm2-135m"] for name in SUITE}, "scaling": ["smollm2-135m", "gemma3-270m"]}
    for name in SUITE:
        assert f"{name}: " in done.stdout  # each study's verdicts on the console
    pngs = sorted(p.relative_to(folder).as_posix() for p in folder.glob("*/*.png"))
    per_category = [f"probe/probe_side-{c.name.replace('_', '-')}_smollm2-135m.png" for c in load_pairs().categories]
    assert pngs == sorted(["ablation/ablation.png", "ablation/ablation_layer_error.png",
                           "ablation/ablation_notebook_scheme.png", "ablation/ablation_notebook_scheme_layer_error.png",
                           "anisotropy/anisotropy_profile.png", "anisotropy/eigenvalue_spectrum.png",
                           "atlas/atlas_profiles.png", "atlas/cka_smollm2-135m.png",
                           "atlas/massive_map_smollm2-135m.png", "divergence/divergence.png", "phases/phases.png",
                           *per_category, "probe/probe_side_smollm2-135m.png", "scaling/scaling.png",
                           "surgery/surgery_layers_smollm2-135m.png", "surgery/surgery_pruning_smollm2-135m.png"])
    check = render(folder / "index.html")
    assert len(check["images"]) == len(pngs) and all(check["images"])  # every figure embedded and decoded
    assert check["sections"][0] == "Summary of verdicts" and check["sections"][-1] == "Manifest"
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert page.count('<table class="summary-table">') == 1  # the verdicts of all eight studies in one table
    assert page.index('<table class="summary-table">') < page.index('<h2 id="divergence">')
