"""The router's preset and its refusals, without a process: bad model ids and launch options
the shared router cannot honour are refused by name before anything is written or started."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import LaunchOptions, RuntimeFailure, SharedEngineAdapter
from gridctl.node.runtimes.launching import EngineSettings
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.llamacpp_router import LlamaCppRouterRuntime, preset_text


class NoJournal:
    def spawned(self, model_id: str, pid: int, port: int) -> None:
        raise AssertionError("nothing may be spawned")

    def proven(self, model_id: str, identity: ProcessIdentity) -> None:
        raise AssertionError("nothing may be spawned")


def _router(tmp_path: Path) -> LlamaCppRouterRuntime:
    return LlamaCppRouterRuntime(
        binary=tmp_path / "llama-server", key_file=tmp_path / "k", api_key="k", log_dir=tmp_path
    )


def test_the_preset_names_each_model_with_the_engine_settings() -> None:
    text = preset_text(
        {"b-model": Path("/c/b.gguf"), "a-model": Path("/c/a.gguf")},
        EngineSettings(threads=3, ctx_size=512, parallel=4),
    )
    assert text.index("[a-model]") < text.index("[b-model]")
    assert "model = /c/a.gguf\nparallel = 4\nctx-size = 512\nthreads = 3\n" in text


@pytest.mark.parametrize("model_id", ["", "a]b", "a\nmodel = /etc/x", "a=b"])
def test_a_model_id_that_could_rewrite_the_preset_is_refused(model_id: str) -> None:
    with pytest.raises(RuntimeFailure) as refused:
        preset_text({model_id: Path("/c/a.gguf")}, EngineSettings())
    assert refused.value.reason == "router_model_unknown"


def test_options_the_shared_router_cannot_honour_are_refused_before_launch(
    tmp_path: Path,
) -> None:
    router = _router(tmp_path)
    for options in (LaunchOptions(chat_template="gemma"), LaunchOptions(embeddings=True)):
        with pytest.raises(RuntimeFailure) as refused:
            router.start("m", tmp_path / "m.gguf", 1, NoJournal(), options)
        assert refused.value.reason == "router_options_unsupported"
    assert not router.preset_path.exists() and router.router is None


def test_only_the_router_is_a_shared_engine(tmp_path: Path) -> None:
    assert isinstance(_router(tmp_path), SharedEngineAdapter)
    single = LlamaCppRuntime(
        binary=tmp_path / "llama-server", key_file=tmp_path / "k", api_key="k", log_dir=tmp_path
    )
    assert not isinstance(single, SharedEngineAdapter)
