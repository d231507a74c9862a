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
