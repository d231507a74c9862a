"""Surgery on the real SmolLM2-135M: `layerscope run surgery` end to end (a small subset, every intervention
kind), with skip and swap numbers checked against HF's own `labels` loss on a hand-edited block list."""

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.data.texts import load_texts
from layerscope.models import decoder_layers

pytestmark = pytest.mark.integration
runner = CliRunner()
N_TEXTS = 8


def edited_loss(lm, order: list[int], text: str) -> float:
    """HF's mean NLL (``labels=input_ids``) of ``text`` under a copy of the model whose blocks are ``order``."""
    ref = copy.deepcopy(lm.model)
    ref.model.layers = nn.ModuleList([decoder_layers(ref)[k] for k in order])
    ref.config.num_hidden_layers = len(order)
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float(ref(ids, labels=ids, use_cache=False).loss)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, smollm2):
    out = tmp_path_factory.mktemp("surgery") / "run"
    result = runner.invoke(app, ["run", "surgery", "--model", "smollm2-135m", "--max-texts", str(N_TEXTS),
                                 "--max-k", "3", "--n-permutations", "500", "--n-bootstrap", "500",
                                 "--boundaries", "2,19", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_run_surgery_on_smollm2_end_to_end(finished, smollm2):
    table = pd.read_csv(finished / "table.csv")
    result = json.loads((finished / "result.json").read_text())
    s = result["summary"]["models"]["smollm2-135m"]
    n = smollm2.info.n_layers
    main = table[(table["lang"] == "all") & (table["metric"] == "delta_nll")]
    assert len(main[main["intervention"] == "skip"]) == n and len(main[main["intervention"] == "swap"]) == n - 1
    # The seeded subset, recomputed: the config's seed picks N_TEXTS of the bundled texts.
    texts = load_texts(None).texts
    index = sorted(int(i) for i in np.random.default_rng(42).choice(len(texts), size=N_TEXTS, replace=False))
    picked = [texts[i] for i in index]
    intact = [edited_loss(smollm2, list(range(n)), t) for t in picked]
    for kind, layer, order in (("skip", 0, list(range(1, n))), ("swap", 10, [*range(10), 11, 10, *range(12, n)])):
        want = np.mean([edited_loss(smollm2, order, t) - base for t, base in zip(picked, intact, strict=True)])
        got = main[(main["intervention"] == kind) & (main["layer"] == layer)]["value"].item()
        assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert s["boundaries"]["given"]["states"] == [2, 19]
    assert set(s["pruning"]["k"]) == {1, 2, 3}
    report = (finished / "report.md").read_text()
    assert "Critical blocks" in report and "Pruning curve" in report
    assert len(list(finished.glob("surgery_*.png"))) == 2
