"""Hub ids with a revision (``OWNER/NAME@REVISION``), loaded offline from a fake hub cache."""

import pytest

import tiny
from hubcache import fake_hub, use_hub
from layerscope import ModelLoadError, extract, load_model
from layerscope.study.manifests import model_entry


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """``owner/tiny`` at step100 (2 layers) and step200 (4 layers); main is step200."""
    folders = {"step100": tiny.save(tmp_path / "a", "llama", adds_bos=False, n_layers=2),
               "step200": tiny.save(tmp_path / "b", "llama", adds_bos=False, n_layers=4)}
    root = fake_hub(tmp_path / "hub", "owner/tiny", folders)
    use_hub(monkeypatch, root)
    return root


def test_each_revision_loads_its_own_weights(hub):
    early, late = load_model("owner/tiny@step100", device="cpu"), load_model("owner/tiny@step200", device="cpu")
    assert (early.info.n_layers, late.info.n_layers) == (2, 4)
    assert early.info.weights_hash != late.info.weights_hash
    assert (early.info.name, early.info.revision, early.info.source) == ("owner/tiny@step100", "step100", "owner/tiny")
    assert load_model("owner/tiny", device="cpu").info.weights_hash == late.info.weights_hash  # refs/main
    assert load_model("owner/tiny", device="cpu").info.revision is None


def test_the_revision_is_in_the_activation_fingerprint_and_the_manifest(hub):
    early, late = load_model("owner/tiny@step100", device="cpu"), load_model("owner/tiny@step200", device="cpu")
    a, b = extract(early, tiny.TEXTS, batch_size=4), extract(late, tiny.TEXTS, batch_size=4)
    assert a.fingerprint != b.fingerprint
    assert a.model.revision == "step100" and b.model.revision == "step200"
    assert model_entry(a.model, a)["revision"] == "step100"
    main = load_model("owner/tiny", device="cpu")  # the same weights as step200, but another revision
    assert extract(main, tiny.TEXTS, batch_size=4).fingerprint != b.fingerprint


def test_a_revision_missing_from_the_cache_is_a_clear_error(hub):
    with pytest.raises(ModelLoadError) as error:
        load_model("owner/tiny@step300")
    message = str(error.value)
    assert "owner/tiny@step300" in message and "revision 'step300'" in message
    assert "cached revisions: main, step100, step200" in message
