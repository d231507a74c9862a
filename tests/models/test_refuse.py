"""Models whose numbers would mean nothing are refused at load time, each with one clear error."""

import hashlib
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForMaskedLM, BertLMHeadModel

import tiny
from layerscope import ModelLoadError, load_model
from layerscope.models import LoadedModel
from layerscope.models.checks import check_causal
from layerscope.models.info import max_positions


def bert(folder, cls=BertForMaskedLM, is_decoder=False):
    """A tiny BERT with tiny's tokenizer, weights widened like tiny.model's so attention is not uniform."""
    tok = tiny.tokenizer(False)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, is_decoder=is_decoder)
    model = cls(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def files_of(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def error_of(spec) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(str(spec), device="cpu")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_masked_lm_bert_folder_is_refused(tmp_path):
    folder = bert(tmp_path / "bert")
    before = files_of(folder)
    message = error_of(folder)
    assert "saved as BertForMaskedLM" in message and "not a causal LM" in message and "decoder-only" in message
    assert files_of(folder) == before


def test_a_bert_that_attends_to_later_tokens_is_refused_by_what_it_computes(tmp_path):
    """Saved as BertLMHeadModel (a causal-LM class) but with is_decoder=False: only running it shows it."""
    folder = bert(tmp_path / "bert", BertLMHeadModel, is_decoder=False)
    message = error_of(folder)
    assert "is not a causal LM (its config says is_decoder=False)" in message and "later tokens" in message


def test_the_causality_probe_tells_a_decoder_from_an_encoder():
    tok = tiny.tokenizer(False)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, is_decoder=True)
    model = BertLMHeadModel(config).eval()
    check_causal(model, tok, "causal-bert")  # the same weights with a causal mask pass
    model.config.is_decoder = False
    for layer in model.bert.encoder.layer:
        layer.attention.self.is_causal = False
        layer.attention.self.is_decoder = False
    with pytest.raises(ModelLoadError, match="is not a causal LM"):
        check_causal(model, tok, "encoder-bert")
    with pytest.raises(ModelLoadError, match="is not a causal LM"):
        LoadedModel.wrap(model, tok, name="encoder-bert")  # wrapped models are checked too


def test_a_causal_bert_decoder_loads(tmp_path):
    lm = load_model(str(bert(tmp_path / "bert", BertLMHeadModel, is_decoder=True)), device="cpu")
    assert lm.info.architecture == "BertLMHeadModel" and lm.info.max_positions == 64


def test_weights_missing_from_the_checkpoint_are_named(tmp_path):
    folder = tiny.save(tmp_path / "llama", "llama", adds_bos=False)
    weights = load_file(folder / "model.safetensors")
    dropped = ["model.layers.1.mlp.down_proj.weight", "lm_head.weight"]
    save_file({k: v for k, v in weights.items() if k not in dropped}, folder / "model.safetensors",
              metadata={"format": "pt"})
    message = error_of(folder)
    assert "no trained weights for 2 tensor(s) of LlamaForCausalLM" in message
    assert f"({', '.join(sorted(dropped))})" in message and "at random" in message


def test_tied_weights_absent_from_the_file_are_trained(tmp_path):
    folder = tiny.save(tmp_path / "gpt2", "gpt2", adds_bos=False)
    assert "lm_head.weight" not in load_file(folder / "model.safetensors")  # tied to the embeddings
    lm = load_model(str(folder), device="cpu")
    assert lm.info.max_positions == 256


@pytest.mark.parametrize("content, why", [(b"garbage" * 10, "header too large"), (None, "not fully covered")])
def test_a_corrupt_safetensors_file_is_named(tmp_path, content, why):
    folder = tiny.save(tmp_path / "llama", "llama", adds_bos=False)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(content if content is not None else data[: len(data) // 2])
    before = files_of(folder)
    message = error_of(folder)
    assert message.startswith(f"{path} is not a readable safetensors file") and why in message
    assert "download or save the model again" in message and files_of(folder) == before


def test_a_folder_without_tokenizer_files_says_so(tmp_path):
    folder = tiny.save(tmp_path / "llama", "llama", adds_bos=False)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    message = error_of(folder)
    assert f"model folder {folder} has no tokenizer files" in message and "tokenizer.save_pretrained" in message
    assert "sentencepiece" not in message.split("(none of")[0]


@pytest.mark.parametrize("content, expected", [(b"not a gguf file at all", "is not a GGUF file"),
                                               (b"GGUF" + bytes(range(256)) * 8, "could not convert the GGUF file")])
def test_an_invalid_gguf_file_leaves_nothing_in_the_cache(tmp_path, monkeypatch, content, expected):
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    path.write_bytes(content)
    message = error_of(path)
    assert str(path) in message and expected in message and "download it again" in message
    assert path.read_bytes() == content
    models = tmp_path / "cache" / "models"
    assert not models.exists() or list(models.iterdir()) == []  # no .lock, no .partial


def test_max_positions_is_read_from_the_config():
    assert tiny.tiny_lm("llama").info.max_positions == 256
    assert tiny.tiny_lm("gpt2").info.max_positions == 256

    def fake(**config):
        return SimpleNamespace(config=SimpleNamespace(**config))
    assert max_positions(fake(n_positions=1024)) == 1024
    assert max_positions(fake(max_seq_len=2048)) == 2048
    assert max_positions(fake(hidden_size=32)) is None  # no limit named: unbounded
