"""The lens of one prompt on the real SmolLM2-135M: its last layer is the model's own argmax at every position
(computed here from the logits), and `layerscope lens` prints the 31-row grid ending in " Paris"."""

import pytest
import torch
from typer.testing import CliRunner

import layerscope as ls
from layerscope.cli import app

pytestmark = pytest.mark.integration
PROMPT = "The capital of France is"


def test_last_layer_is_smollm2s_argmax(smollm2):
    table = ls.lens(smollm2, PROMPT, top_k=5)
    ids = smollm2.tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():
        logits = smollm2.model(input_ids=torch.tensor([ids], device=smollm2.model.device)).logits[0].float()
    n_layers = smollm2.info.n_layers
    assert table.top1(column="token_id").loc[n_layers].tolist() == logits.argmax(dim=-1).tolist()
    want = torch.softmax(logits, dim=-1).max(dim=-1).values.tolist()
    assert table.top1(column="prob").loc[n_layers].tolist() == pytest.approx(want, rel=1e-4)
    assert table.top1().loc[n_layers].iloc[-1] == " Paris"


def test_cli_prints_the_grid():
    result = CliRunner().invoke(app, ["lens", PROMPT, "--model", "smollm2-135m"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    assert lines[start].split() == ["layer", "The", "·capital", "·of", "·France", "·is"]
    assert [line.split()[0] for line in lines[start + 1 : start + 32]] == [str(layer) for layer in range(31)]
    assert lines[start + 31].split()[-1] == "·Paris"
