"""The llama-server command line: a profile's built-in chat template, else the GGUF's own."""

from __future__ import annotations

from pathlib import Path

from gridctl.node.runtimes.llamacpp import LlamaCppRuntime


def runtime(tmp_path: Path) -> LlamaCppRuntime:
    return LlamaCppRuntime(
        binary=tmp_path / "llama-server",
        key_file=tmp_path / "key",
        api_key="k",
        log_dir=tmp_path / "logs",
    )


def test_a_named_template_uses_the_builtin_path(tmp_path: Path) -> None:
    argv = runtime(tmp_path).argv("gemma", tmp_path / "m.gguf", 23001, "gemma")
    at = argv.index("--chat-template")
    assert argv[at + 1] == "gemma" and "--no-jinja" in argv and "--jinja" not in argv


def test_without_a_name_the_gguf_template_is_used(tmp_path: Path) -> None:
    argv = runtime(tmp_path).argv("m", tmp_path / "m.gguf", 23001)
    assert "--jinja" in argv and "--chat-template" not in argv and "--no-jinja" not in argv


def test_declared_embeddings_start_the_engine_with_mean_pooling(tmp_path: Path) -> None:
    argv = runtime(tmp_path).argv("m", tmp_path / "m.gguf", 23001, embeddings=True)
    assert "--embeddings" in argv
    assert argv[argv.index("--pooling") + 1] == "mean"  # a generative GGUF pools nothing
    plain = runtime(tmp_path).argv("m", tmp_path / "m.gguf", 23001)
    assert "--embeddings" not in plain and "--pooling" not in plain


def test_a_split_coordinator_reaches_its_stages_only_through_the_forwarders(
    tmp_path: Path,
) -> None:
    forwarders = ("127.0.0.1:41001", "127.0.0.1:41002")
    argv = runtime(tmp_path).argv(
        "m", tmp_path / "m.gguf", 23001, rpc_servers=forwarders, tensor_split=(9, 9)
    )
    assert argv[argv.index("--rpc") + 1] == "127.0.0.1:41001,127.0.0.1:41002"
    assert argv[argv.index("-ngl") + 1] == "999"  # every layer goes to the stages
    assert argv[argv.index("--tensor-split") + 1] == "9,9"
    plain = runtime(tmp_path).argv("m", tmp_path / "m.gguf", 23001)
    assert not {"--rpc", "-ngl", "--tensor-split"} & set(plain)
