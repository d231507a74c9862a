"""A GGUF file read as a tiny Llama, so a conversion's writes (``save_pretrained``) run for real and fast.

    fake_gguf(monkeypatch.setattr)                  # transformers reads any gguf_file as tiny.model("llama")
    fake_gguf(setattr, after_read=set_ulimit)       # in a subprocess; after_read runs once the model is "read"

Only ``from_pretrained(..., gguf_file=...)`` is faked; every other source loads for real.
"""

import transformers

import tiny


def from_gguf(real, made):
    """``from_pretrained`` that reads the GGUF file as ``made()``, any other source with ``real``."""
    def from_pretrained(source, *args, gguf_file=None, **kwargs):
        return made() if gguf_file else real.from_pretrained(source, *args, **kwargs)
    return from_pretrained


def fake_gguf(setattr, after_read=lambda: None) -> None:
    """Make reading a GGUF file give a tiny Llama and its tokenizer (``setattr``: how to patch)."""
    tok = tiny.tokenizer(False)

    def model():
        made = tiny.model("llama", len(tok))
        after_read()
        return made
    setattr(transformers.AutoTokenizer, "from_pretrained", from_gguf(transformers.AutoTokenizer, lambda: tok))
    setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_gguf(transformers.AutoModelForCausalLM, model))
