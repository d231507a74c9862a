"""Every failed write is one error naming the path and the cause, never a traceback: a full disk (ENOSPC), an
exceeded quota (EDQUOT), a file-size limit (EFBIG), a read-only file system (EROFS) and no permission (EACCES),
each raised by a patched write in the activation cache, the model conversion and the run folder, through
Python and through the CLI (exit 2, one ``error:`` line). One conversion runs under a real ``ulimit -f``.

    .venv/bin/python -m pytest -q tests/test_write_errors.py
"""

import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from safetensors import SafetensorError
from typer.testing import CliRunner

import tiny
from conftest import error_line
from fake_gguf import fake_gguf
from layerscope import extract
from layerscope.cli import app
from layerscope.errors import EDQUOT, CacheError, DiskFullError, LayerscopeError, OutputError, write_cause
from layerscope.io import disk_full
from layerscope.paths import cache_error
from layerscope.study import StudyResult

runner = CliRunner()

CAUSES = {  # errno: (the cause in words, a piece of its fix)
    errno.ENOSPC: ("the disk is full", "free some space"),
    EDQUOT: ("the disk quota is exceeded", "free some space within your quota"),
    errno.EFBIG: ("the file is larger than the file-size limit allows (ulimit -f)", "`ulimit -f unlimited`"),
    errno.EROFS: ("the file system is read-only", "on a writable file system"),
    errno.EACCES: ("permission denied", "that you can write to"),
}
ERRNOS = pytest.mark.parametrize("code", list(CAUSES), ids=[errno.errorcode[c] for c in CAUSES])

model = pytest.fixture(scope="module", name="model")(lambda out_model: out_model)  # conftest's tiny model


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    """No progress lines: a slow machine would print them beside the one error line."""
    monkeypatch.setenv("LAYERSCOPE_PROGRESS", "0")


def os_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def rust_error(code: int) -> SafetensorError:
    """What safetensors raises when its write fails (the errno only in the text)."""
    return SafetensorError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})")


def assert_names(message: str, path, code: int) -> None:
    """``message`` is one line naming ``path``, the cause of ``code`` and its fix."""
    words, fix = CAUSES[code]
    assert str(path) in message and words in message and fix in message, message
    assert "\n" not in message and "os error" not in message and "Errno" not in message, message


# -- the cause in words --

@ERRNOS
@pytest.mark.parametrize("make", [os_error, rust_error], ids=["OSError", "SafetensorError"])
def test_each_errno_is_worded_with_its_fix(code, make):
    cause = write_cause(make(code))
    assert cause.code == code and cause.words == CAUSES[code][0]
    assert CAUSES[code][1] in cause.fix("choose another --out")
    assert cause.full == (code in (errno.ENOSPC, EDQUOT))


def test_other_errors_are_not_worded():
    assert write_cause(os_error(errno.EIO)) is None and write_cause(ValueError("no os error here")) is None
    assert write_cause(OutputError("already worded (os error 28)")) is None


@pytest.mark.parametrize("code", [errno.ENOSPC, EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_disk_full_error_from_atomic_file_gets_the_caches_fix(tmp_path, monkeypatch, code):
    """The store's atomic rewrites (journal, meta.json) raise DiskFullError; the cache words it as its own."""
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path))
    path = tmp_path / "activations" / "m" / "e" / "journal.jsonl"
    message = str(cache_error(path, disk_full(path, 10, code=code)))
    assert_names(message, path, code)
    assert "LAYERSCOPE_CACHE" in message and "--no-cache" in message and "--out" not in message


# -- the activation cache: every os.pwrite of the store fails --

@pytest.fixture
def failing_pwrite(monkeypatch):
    """``failing_pwrite(code)``: from now on every ``os.pwrite`` fails with ``code``."""
    def fail_with(code: int) -> None:
        def pwrite(fd, data, offset):
            raise os_error(code)
        monkeypatch.setattr(os, "pwrite", pwrite)
    return fail_with


@ERRNOS
def test_a_failed_store_write_is_one_error_naming_the_cache_folder(tmp_path, failing_pwrite, code):
    failing_pwrite(code)
    with pytest.raises(LayerscopeError) as caught:
        extract(tiny.tiny_lm("llama"), tiny.TEXTS, batch_size=4, cache=tmp_path / "acts")
    assert isinstance(caught.value, CacheError)
    assert_names(str(caught.value), tmp_path / "acts", code)
    assert "pass another cache folder" in str(caught.value) and "cache=False" in str(caught.value)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pairs.json"
    path.write_text(json.dumps(tiny.pairs(2, 3)))
    return str(path)


@ERRNOS
def test_extract_with_a_failing_cache_write_is_one_line(tmp_path, isolated_cache, failing_pwrite, model, dataset,
                                                        code):
    failing_pwrite(code)
    line = error_line(runner.invoke(app, ["extract", "--model", model, "--dataset", dataset,
                                          "--out", str(tmp_path / "out")]))
    assert_names(line, isolated_cache / "activations", code)
    assert "$LAYERSCOPE_CACHE" in line and "--no-cache" in line
    assert not (tmp_path / "out").exists()


# -- the model conversion: save_pretrained's safetensors write fails --



@pytest.fixture
def gguf(tmp_path, monkeypatch):
    """A GGUF file whose reading is faked (tests/fake_gguf.py), in a cache of its own (not the shared models folder)."""
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(tmp_path / "cache"))
    fake_gguf(monkeypatch.setattr)
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    return path


def failing_save(monkeypatch, code: int) -> None:
    """save_pretrained's safetensors write fails with ``code``, as safetensors reports it."""
    import transformers.modeling_utils

    def save_file(*args, **kwargs):
        raise rust_error(code)
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", save_file)


def assert_nothing_converted(tmp_path) -> None:
    """No converted folder, no partial one, no lock file: the cache's models folder is empty."""
    assert list((tmp_path / "cache" / "models").iterdir()) == []


@ERRNOS
def test_a_failed_conversion_write_is_one_error_and_leaves_nothing(tmp_path, monkeypatch, gguf, code):
    from layerscope.models.zoo import converted_gguf

    failing_save(monkeypatch, code)
    with pytest.raises(LayerscopeError) as caught:
        converted_gguf(gguf)
    assert isinstance(caught.value, DiskFullError if code in (errno.ENOSPC, EDQUOT) else CacheError)
    assert_names(str(caught.value), tmp_path / "cache" / "models" / "gguf-m-", code)
    assert "LAYERSCOPE_CACHE" in str(caught.value) and "--no-cache" not in str(caught.value)  # it converts anyway
    assert_nothing_converted(tmp_path)


@ERRNOS
def test_loading_a_gguf_whose_conversion_fails_is_one_line(tmp_path, monkeypatch, gguf, dataset, code):
    failing_save(monkeypatch, code)
    line = error_line(runner.invoke(app, ["extract", "--model", str(gguf), "--dataset", dataset,
                                          "--out", str(tmp_path / "out")]))
    assert_names(line, tmp_path / "cache" / "models" / "gguf-m-", code)
    assert_nothing_converted(tmp_path)
    assert not (tmp_path / "out").exists()


def test_a_conversion_past_a_real_file_size_limit_is_one_line(tmp_path, dataset):
    """The issue's case: ``ulimit -f`` set (after the GGUF file is read), the safetensors file outgrows it, and
    the conversion ends in one line, exit 2, where it ended in ``SafetensorError ... (os error 27)``."""
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""
        import resource, sys
        from fake_gguf import fake_gguf
        limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16384, resource.RLIM_INFINITY))
        fake_gguf(setattr, after_read=limit)  # Python ignores SIGXFSZ: an oversized write fails with EFBIG
        from layerscope.cli import main
        sys.argv = ["layerscope", *sys.argv[1:]]
        main()
    """))
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(60))
    env = {**os.environ, "LAYERSCOPE_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "LAYERSCOPE_PROGRESS": "0",
           "PYTHONPATH": os.pathsep.join([str(pathlib.Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(driver), "extract", "--model", str(tmp_path / "m.gguf"),
                           "--dataset", dataset, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == ""  # blank lines only: the tiny tokenizer's trainer (tokenizers) prints them
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: the layerscope cache ") and "cannot convert the model into" in line
    assert_names(line, tmp_path / "cache" / "models" / "gguf-m-", errno.EFBIG)
    assert_nothing_converted(tmp_path)


# -- the run folder: a file of the staged folder cannot be written --

@pytest.fixture
def failing_run_file(monkeypatch):
    """``failing_run_file(code)``: writing table.csv into a staged (``.partial``) folder fails with ``code``."""
    write_bytes = pathlib.Path.write_bytes

    def fail_with(code: int) -> None:
        def write(path, data):
            if path.parent.name.endswith(".partial") and path.name == "table.csv":
                raise os_error(code)
            return write_bytes(path, data)
        monkeypatch.setattr(pathlib.Path, "write_bytes", write)
    return fail_with


def assert_run_error(message: str, out, code: int) -> None:
    """A run folder's error: ``out``, the cause, the fix with another --out (or out folder)."""
    assert_names(message, out, code)
    assert "choose another" in message
    if code in (errno.ENOSPC, EDQUOT):  # the disk-full error as before: the bytes needed, quota named as quota
        assert message.startswith(f"{CAUSES[code][0]}: writing {out} needs about ")
        assert "nothing of it was kept" in message
    else:
        assert message.startswith(f"cannot write {out}: {CAUSES[code][0]}; ")


@ERRNOS
def test_a_failed_run_folder_write_is_one_error_and_leaves_nothing(tmp_path, failing_run_file, finished, code):
    result = StudyResult.load(finished)
    failing_run_file(code)
    with pytest.raises(OutputError) as caught:
        result.write(tmp_path / "out")
    assert_run_error(str(caught.value), tmp_path / "out", code)
    assert "another out folder" in str(caught.value)  # the Python spelling of --out
    assert list(tmp_path.iterdir()) == []  # no out/, no .out.*.partial


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One activation cache for the run tests: the model's activations are computed once, not once per errno."""
    return tmp_path_factory.mktemp("shared-cache")


@ERRNOS
def test_run_with_a_failing_run_folder_write_is_one_line(tmp_path, monkeypatch, failing_run_file, model,
                                                         shared_cache, code):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(shared_cache))
    failing_run_file(code)
    line = error_line(runner.invoke(app, ["run", "divergence", "--model", model, "--n-permutations", "100",
                                          "--out", "out"]))
    assert_run_error(line.removeprefix("error: "), "out", code)
    assert "choose another --out" in line
    assert list(tmp_path.iterdir()) == []


@ERRNOS
def test_a_suite_whose_config_cannot_be_written_is_one_line(tmp_path, monkeypatch, model, code):
    """``layerscope run`` with several studies writes its config.yaml first; that write fails."""
    import tempfile

    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.yaml").write_text("studies: [divergence, anisotropy]\n")
    mkstemp = tempfile.mkstemp

    def failing(*args, prefix=None, **kwargs):
        if prefix == ".config.yaml.":
            raise os_error(code)
        return mkstemp(*args, prefix=prefix, **kwargs)
    monkeypatch.setattr(tempfile, "mkstemp", failing)
    line = error_line(runner.invoke(app, ["run", "--config", "suite.yaml", "--model", model, "--out", "out"]))
    assert line.startswith(f"error: cannot write out: {CAUSES[code][0]}; ") and "choose another --out" in line
    assert_names(line, "out", code)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.yaml"]  # no out/, no .out.partial


# -- lens --out, report and sweep: their own files cannot be written --

@pytest.fixture
def failing_temp(monkeypatch):
    """``failing_temp(code, suffixes)``: ``atomic_file``'s temp file (``.NAME.XXXX.tmp``) for a file whose name
    ends with one of ``suffixes`` (e.g. ``lens.csv``) cannot be made: it fails with ``code``, as the first write
    into a folder would."""
    import tempfile

    mkstemp = tempfile.mkstemp

    def fail_with(code: int, suffixes: tuple[str, ...]) -> None:
        def failing(*args, prefix=None, **kwargs):
            if prefix is not None and prefix[1:-1].endswith(suffixes):
                raise os_error(code)
            return mkstemp(*args, prefix=prefix, **kwargs)
        monkeypatch.setattr(tempfile, "mkstemp", failing)
    return fail_with


@ERRNOS
def test_lens_with_an_unwritable_out_is_one_line(tmp_path, monkeypatch, failing_temp, model, code):
    monkeypatch.chdir(tmp_path)
    failing_temp(code, ("lens.csv",))
    result = runner.invoke(app, ["lens", "The cat sat", "--model", model, "--out", "out"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = result.output.splitlines()[-1]  # after the grid it prints
    assert line.startswith(f"error: cannot write out: {CAUSES[code][0]}; ") and "choose another --out" in line
    assert_names(line, "out", code)
    assert not list((tmp_path / "out").glob("lens*"))  # nothing half-written


@ERRNOS
def test_report_of_an_unwritable_run_folder_is_one_line(tmp_path, failing_temp, finished, code):
    import shutil

    folder = shutil.copytree(finished, tmp_path / "div")
    before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    failing_temp(code, ("index.html",))
    line = error_line(runner.invoke(app, ["report", str(folder)]))
    assert_names(line, folder, code)
    assert "copy the run folder to another folder" in line
    failing_temp(code, (".svg",))
    line = error_line(runner.invoke(app, ["report", str(folder), "--figure-format", "svg"]))
    assert_names(line, folder, code)
    assert {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def sweep_file(tmp_path, model) -> str:
    (tmp_path / "sweep.yaml").write_text(f"study: divergence\nmodels: [{model}]\nn_permutations: 100\n")
    return "sweep.yaml"


@ERRNOS
def test_a_sweep_whose_folder_cannot_be_prepared_is_one_line(tmp_path, monkeypatch, failing_temp, model, code):
    monkeypatch.chdir(tmp_path)
    failing_temp(code, ("config.yaml",))
    line = error_line(runner.invoke(app, ["sweep", "--config", sweep_file(tmp_path, model), "--out", "out"]))
    assert line.startswith(f"error: cannot write out: {CAUSES[code][0]}; ") and "choose another --out" in line
    assert_names(line, "out", code)


def test_a_sweep_whose_table_cannot_be_gathered_is_one_line(tmp_path, monkeypatch, failing_temp, model,
                                                             shared_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERSCOPE_CACHE", str(shared_cache))
    failing_temp(errno.EFBIG, ("table.csv",))
    result = runner.invoke(app, ["sweep", "--config", sweep_file(tmp_path, model), "--out", "out"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert line.startswith(f"error: cannot write out: {CAUSES[errno.EFBIG][0]}; ")
    assert_names(line, "out", errno.EFBIG)
    assert not (tmp_path / "out" / "table.csv").exists()
