"""Tiny randomly initialised causal LMs and a tokenizer trained in code, for fast tests.

    tok = tokenizer(adds_bos=True)           # byte-level BPE, "<bos> $text" when adds_bos
    lm = tiny_lm("llama", adds_bos=False)   # a LoadedModel, 3 layers, d=32
"""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    OPTConfig,
    PreTrainedTokenizerFast,
)

from layerscope.models import LoadedModel

ARCHS = ("llama", "gpt2", "gpt_neox", "opt", "gemma3")

CORPUS = [
    "The river carried small boats past the old mill every morning.",
    "Seven of the twelve students passed the exam on their first try.",
    "A warm breeze moved through the orchard as the sun went down.",
    "Prices rose by four percent over the last quarter, analysts said.",
    "She tuned the violin slowly, listening for the faint beat between strings.",
    "Bread dough doubles in size when the yeast is active and the room is warm.",
    "The committee will review every application before the end of March.",
    "Hey, can you grab some milk on your way home tonight?",
    "Quantum computers use qubits that can hold superpositions of states.",
    "Ice floats because water expands as it freezes into a crystal lattice.",
]

TEXTS = [
    "The cat sat.",
    "A warm breeze moved through the orchard as the sun went down over the hills.",
    "Seven students passed.",
    "Prices rose by four percent.",
    "Hey, grab some milk tonight?",
    "Quantum computers use qubits that hold superpositions of many states at once.",
    "Bread dough doubles in size.",
    "Ice floats.",
    "The committee will review every application before the end of March, said the chair.",
    "She tuned the violin slowly.",
    "Water expands as it freezes.",
]
"""Texts of very different lengths, so batches carry plenty of padding."""


@functools.cache
def tokenizer(adds_bos: bool) -> PreTrainedTokenizerFast:
    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    if adds_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def config(arch: str, vocab_size: int, n_layers: int = 3):
    common = {"vocab_size": vocab_size, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    if arch == "llama":
        return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=256, **common)
    if arch == "gpt2":
        return GPT2Config(n_embd=32, n_layer=n_layers, n_head=4, n_positions=256, **common)
    if arch == "gpt_neox":
        return GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers,
                             num_attention_heads=4, max_position_embeddings=256, **common)
    if arch == "opt":
        return OPTConfig(hidden_size=32, ffn_dim=64, num_hidden_layers=n_layers, num_attention_heads=4,
                         max_position_embeddings=256, word_embed_proj_dim=32, **common)
    if arch == "gemma3":
        return Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                max_position_embeddings=256, sliding_window=4, **common)
    raise ValueError(arch)


def model(arch: str, vocab_size: int, n_layers: int = 3, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(config(arch, vocab_size, n_layers))
    with torch.no_grad():  # random init is tiny (std 0.02); widen it so layers differ visibly
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return m.eval()


def tiny_lm(arch: str = "llama", adds_bos: bool = False, n_layers: int = 3, seed: int = 0) -> LoadedModel:
    tok = tokenizer(adds_bos)
    return LoadedModel.wrap(model(arch, len(tok), n_layers, seed), tok,
                            name=f"tiny-{arch}-{'bos' if adds_bos else 'nobos'}")


def save(folder, arch: str = "llama", adds_bos: bool = True, n_layers: int = 3, seed: int = 0):
    """Write a tiny model and its tokenizer as a ``save_pretrained`` folder; returns the folder."""
    model(arch, len(tokenizer(adds_bos)), n_layers, seed).save_pretrained(folder)
    tokenizer(adds_bos).save_pretrained(folder)
    return folder


SUBJECTS = ["the river", "the market", "our team", "the garden", "the library", "the bridge", "the school",
            "the orchard", "the committee", "the bakery", "the harbour", "the choir"]


def pairs(n_categories: int = 4, n_pairs: int = 40) -> dict:
    """``json.dumps(pairs(4, 40))``: a pair dataset in the JSON format, every statement distinct.

    Category ``c`` pairs a confident statement A with a hedged statement B about the same subject and year.
    """
    def pair(c: int, i: int) -> list[str]:
        subject, year = SUBJECTS[i % len(SUBJECTS)], 1900 + i
        return [f"Without doubt {subject} grew {c + 2} times in {year}.",
                f"Maybe {subject} grew a little in {year}, {c + 2} people say."]
    return {f"cat{c}": {"pairs": [pair(c, i) for i in range(n_pairs)]} for c in range(n_categories)}


def random_translators(lens, seed=1, scale=0.1):
    """``lens`` (a TunedLens) with seeded Gaussian translator weights and biases of standard deviation ``scale``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in lens.translators:
            t.weight.copy_(torch.randn(t.weight.shape, generator=gen) * scale)
            t.bias.copy_(torch.randn(t.bias.shape, generator=gen) * scale)
    return lens


@torch.no_grad()
def forward(lm: LoadedModel, texts=None):
    """``ids, batch, out``: token ids, the right-padded batch and the model's output with every hidden state, of
    ``texts`` (default: TEXTS 0, 1 and 3)."""
    import numpy as np

    from layerscope.engine.forward.batching import collate, pad_id, tokenize

    ids = tokenize(lm.tokenizer, texts if texts is not None else [TEXTS[0], TEXTS[1], TEXTS[3]])
    batch = collate(ids, np.arange(len(ids)), pad_id=pad_id(lm.tokenizer), side="right")
    return ids, batch, lm.model(**batch.model_inputs(), output_hidden_states=True, use_cache=False)
