"""``layerscope validate`` from the command line: a tiny model's card written where --out says, its summary line
counted from the card it wrote, and the refusals (texts the model cannot take, an --out that is not empty, a bad
--instances) before any work."""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from layerscope.cli import app
from layerscope.validation.card import standing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tiny  # noqa: E402


@pytest.mark.slow
def test_a_tiny_model_card_from_the_command_line_and_every_row_recomputed_from_its_table(tmp_path):
    from layerscope.validation.run import rescore

    model = tiny.save(tmp_path / "tiny", "llama", adds_bos=False, n_layers=8)
    out = tmp_path / "card"
    got = CliRunner().invoke(app, ["validate", "--model", str(model), "--instances", "2", "--texts", "16",
                                   "--resamples", "20", "--max-length", "96", "--out", str(out)])
    assert got.exit_code == 0, got.output
    table = pd.read_csv(out / "table.csv")
    card = pd.read_csv(out / "card.csv")
    result = json.loads((out / "result.json").read_text())
    assert {"index.html", "report.md"} <= {p.name for p in out.iterdir()}
    assert result["meta"]["model"] == str(model) or result["meta"]["model"].endswith("tiny")
    for c in card.itertuples():
        mine = table[(table["verdict"] == c.verdict) & (table["check"] == c.check) & (table["metric"] == c.metric)]
        assert len(mine) == c.n
        if c.metric in ("boundary_error", "interval_width"):
            assert c.rate == pytest.approx(mine["value"].astype(float).mean())
            continue
        ok = mine["success"].astype(str).str.lower().eq("true")
        events = int((~ok).sum()) if c.metric == "false_alarm" else int(ok.sum())
        assert c.events == events and c.rate == pytest.approx(events / c.n)
    again = rescore(out)["card"]  # the card scored again from the written rows alone equals the run's own
    assert [(c["check"], c["metric"], c["events"], c["n"]) for c in again] == [
        (c["check"], c["metric"], c["events"], c["n"]) for c in result["card"]]
    # what must hold exactly on any model: the plants keep their promises
    exact = card.set_index(["check", "metric"])["rate"]
    assert exact[("derived planted profiles equal a real pass", "derived_diff")] == 1.0
    assert exact[("the logit lens is identical across inserted blocks", "lens_identical")] == 1.0
    assert exact[("a removed band costs what surgery's prune of it costs", "set_cost")] == 1.0
    assert exact[("inserted blocks are never needed", "false_alarm")] == 0.0
    assert exact[("inserted blocks' skip-cost interval holds 0", "interval_holds_zero")] == 1.0
    # the summary line's counts are the card's own, counted here by hand
    words = [standing(c) for c in result["card"]]
    assert f"{len(card)} checks: {words.count('yes')} meet their target, {words.count('no')} miss it" in got.output
    assert f"wrote {out / 'index.html'}" in got.output


def test_texts_longer_than_the_model_takes_are_refused_before_any_work_with_the_fix(tmp_path):
    model = tiny.save(tmp_path / "tiny", "llama", adds_bos=False)  # 256 positions; some bundled texts are longer
    got = CliRunner().invoke(app, ["validate", "--model", str(model), "--out", str(tmp_path / "card")])
    assert got.exit_code == 2 and "more than the 256 positions" in got.output and "--max-length 256" in got.output
    assert "validate:" not in got.output  # no part of the card ran
    assert not (tmp_path / "card").exists() or not any((tmp_path / "card").iterdir())


def test_validate_refuses_a_full_out_folder_and_bad_instances_before_loading_a_model(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    got = CliRunner().invoke(app, ["validate", "--model", str(tmp_path / "no-such-model"), "--out", str(out)])
    assert got.exit_code != 0 and "--force" in got.output
    assert (out / "notes.txt").read_text() == "my notes"
    got = CliRunner().invoke(app, ["validate", "--instances", "1"])
    assert got.exit_code == 2 and "--instances" in got.output
