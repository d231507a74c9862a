"""The probe page's and README's SmolLM2 numbers are what tools/probe_findings.py writes from the kept result.json
of one recorded run (docs/results/probe-smollm2/): a number typed into those blocks by hand, or a page left behind
a newer run, fails here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_pages_quote_the_recorded_run():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "probe_findings.py"),
                           str(ROOT / "docs" / "results" / "probe-smollm2"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
