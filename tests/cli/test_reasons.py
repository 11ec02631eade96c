"""Every stable reason code has plain words, and docs/reasons.md is rendered from them."""

from __future__ import annotations

from pathlib import Path

from gridctl.cli.reasons import GLOSSARY, explain, render_markdown

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_of_every_enum_has_words_and_no_word_lacks_a_code() -> None:
    for title, (enum, words) in GLOSSARY.items():
        assert set(words) == {m.value for m in enum}, title
        assert all(text and text[0].islower() for text in words.values()), title


def test_docs_glossary_is_the_rendered_table() -> None:
    assert (ROOT / "docs" / "reasons.md").read_text(encoding="utf-8") == render_markdown()


def test_explain_words_a_code_and_passes_unknown_text_through() -> None:
    assert "one replica per host" in explain("already_assigned")
    assert explain("something else") == "something else"
