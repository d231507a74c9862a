"""The README's and the command line page's tuned-lens numbers on SmolLM2 are what tools/lens_findings.py writes
from the recorded runs kept in docs/results/tuned-lens-smollm2/: a number typed into those blocks by hand, or a
page left behind a newer run, fails here; and the kept lens's held-out numbers are the held-out ones."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "docs" / "results" / "tuned-lens-smollm2"


def test_the_pages_quote_the_recorded_runs():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "lens_findings.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_kept_lens_is_the_default_recipe_and_names_its_weights():
    config = json.loads((KEPT / "config.json").read_text())
    record = config["layerscope"]
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert record["model"] == "smollm2-135m" and len(config["unembed_hash"]) == 64
    assert (record["steps"], record["tokens_per_step"], record["init"]) == (40, 512, "lstsq")
    tokens = record["tokens"]
    assert tokens["token_draws"] == record["steps"] * record["tokens_per_step"]
    assert tokens["paper_tokens_per_step"] == 2**18 and tokens["distinct_train_rows"] <= tokens["train_rows"]
    held = record["heldout"]
    assert held["tokens"] == tokens["heldout_rows"] and held["metrics"]["tuned_kl"][-1] == 0
