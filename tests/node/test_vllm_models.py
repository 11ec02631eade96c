"""The cache of GGUFs converted for vLLM: once per digest, published atomically, reused.

The converter is the seam: these tests give it small functions that write a directory
(or fail half-way), since the real one needs the 3.5 GB vLLM virtualenv; the real
conversion runs in the vLLM end-to-end tests.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from gridctl.node.runtimes.adapter import RuntimeFailure
from gridctl.node.runtimes.vllm_models import (
    MARKER,
    ConvertedModels,
    subprocess_converter,
)

SHA = "ab" * 32


class Recorder:
    """A converter that writes a small directory and counts its calls."""

    def __init__(self, *, fail_after_writing: bool = False) -> None:
        self.calls = 0
        self.fail_after_writing = fail_after_writing
        self._lock = threading.Lock()

    def __call__(self, gguf: Path, staging: Path) -> None:
        with self._lock:
            self.calls += 1
        staging.mkdir()
        (staging / "config.json").write_text(json.dumps({"from": gguf.name}))
        if self.fail_after_writing:
            raise RuntimeFailure("artifact_conversion_failed", "the converter crashed")
        (staging / "model.safetensors").write_bytes(b"weights")


def test_a_digest_is_converted_once_and_reused(tmp_path: Path) -> None:
    convert = Recorder()
    models = ConvertedModels(tmp_path / "cache", convert)
    first = models.prepare(tmp_path / "m.gguf", SHA)
    assert first == tmp_path / "cache" / SHA
    assert (first / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((first / MARKER).read_text())["artifact_sha256"] == SHA
    again = ConvertedModels(tmp_path / "cache", convert).prepare(tmp_path / "m.gguf", SHA)
    assert again == first and convert.calls == 1
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".lock")] == [
        SHA
    ]


def test_a_failed_conversion_publishes_nothing_and_leaves_no_staging(tmp_path: Path) -> None:
    convert = Recorder(fail_after_writing=True)
    models = ConvertedModels(tmp_path / "cache", convert)
    with pytest.raises(RuntimeFailure) as failed:
        models.prepare(tmp_path / "m.gguf", SHA)
    assert failed.value.reason == "artifact_conversion_failed"
    assert models.published(SHA) is None and not (tmp_path / "cache" / SHA).exists()
    assert not list((tmp_path / "cache").glob(".staging-*"))
    # the next attempt converts again and publishes
    convert.fail_after_writing = False
    assert models.prepare(tmp_path / "m.gguf", SHA) == tmp_path / "cache" / SHA


def test_leftovers_of_a_crash_are_never_served(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    crashed = root / f".staging-{SHA}-999999-dead"
    crashed.mkdir(parents=True)
    (crashed / "config.json").write_text("{}")
    unmarked = root / SHA  # a directory without its marker: not a finished conversion
    unmarked.mkdir()
    (unmarked / "half.safetensors").write_bytes(b"half")
    convert = Recorder()
    models = ConvertedModels(root, convert)
    assert models.published(SHA) is None
    folder = models.prepare(tmp_path / "m.gguf", SHA)
    assert convert.calls == 1 and not (folder / "half.safetensors").exists()
    assert not crashed.exists()


def test_a_marker_for_another_digest_or_format_is_rebuilt(tmp_path: Path) -> None:
    convert = Recorder()
    models = ConvertedModels(tmp_path / "cache", convert)
    folder = models.prepare(tmp_path / "m.gguf", SHA)
    (folder / MARKER).write_text(json.dumps({"artifact_sha256": SHA, "format": 0}))
    models.prepare(tmp_path / "m.gguf", SHA)
    assert convert.calls == 2


def test_concurrent_warms_convert_once(tmp_path: Path) -> None:
    convert = Recorder()
    seen: list[Path] = []
    workers = [
        threading.Thread(
            target=lambda: seen.append(
                ConvertedModels(tmp_path / "cache", convert).prepare(tmp_path / "m.gguf", SHA)
            )
        )
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert seen == [tmp_path / "cache" / SHA] * 4 and convert.calls == 1


def test_a_digest_that_is_not_one_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    models = ConvertedModels(tmp_path / "cache", Recorder())
    for bad in ("../etc", "AB" * 32, "ab" * 31):
        with pytest.raises(ValueError, match="sha256"):
            models.prepare(tmp_path / "m.gguf", bad)
    assert not (tmp_path / "cache").exists()


def test_the_subprocess_converter_reports_the_converters_own_error(tmp_path: Path) -> None:
    """The real subprocess path, run by this interpreter (no vLLM): ``vllm_convert.py``
    fails to import its dependencies or to read the GGUF, and the reason says why."""
    log = tmp_path / "convert.log"
    convert = subprocess_converter(Path(sys.executable), dict, log=lambda: log)
    models = ConvertedModels(tmp_path / "cache", convert)
    gguf = tmp_path / "not-a.gguf"
    gguf.write_bytes(b"nope")
    with pytest.raises(RuntimeFailure) as failed:
        models.prepare(gguf, SHA)
    assert failed.value.reason == "artifact_conversion_failed"
    assert "not-a.gguf exited with" in str(failed.value) and log.read_text()
    assert models.published(SHA) is None
    assert not list((tmp_path / "cache").glob(".staging-*"))


def test_bos_is_added_by_the_saved_tokenizer_only_when_the_gguf_asks(tmp_path: Path) -> None:
    """The converted Gemma tokenizer does not prepend ``<bos>`` although its GGUF says to
    (checked with the real tokenizer: ids [10979] for "Hi" before, [2, 10979] after)."""
    from gridctl.node.runtimes.vllm_convert import ensure_bos

    saved = {"model": {"type": "BPE"}, "post_processor": None}
    (tmp_path / "tokenizer.json").write_text(json.dumps(saved))
    ensure_bos(tmp_path, False, 2, "<bos>")
    assert json.loads((tmp_path / "tokenizer.json").read_text()) == saved
    ensure_bos(tmp_path, True, 2, "<bos>")
    written = json.loads((tmp_path / "tokenizer.json").read_text())
    processor = written["post_processor"]
    assert processor["type"] == "TemplateProcessing"
    assert processor["single"][0] == {"SpecialToken": {"id": "<bos>", "type_id": 0}}
    assert processor["special_tokens"]["<bos>"]["ids"] == [2]
    assert written["model"] == saved["model"]
