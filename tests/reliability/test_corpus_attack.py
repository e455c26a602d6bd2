"""A charlm corpus no character model can be meant for (empty, binary,
not UTF-8, one distinct character) is refused in one line with exit code 2 before anything
is built from it; one huge line is read only as far as ``max_chars`` reaches."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from esper_tasks.corpus import read_text

from tests.conftest import Invoke
from tests.reliability.cli_runs import failed_in_one_line

CHARLM = [
    "run",
    "--task",
    "charlm",
    "--policy",
    "wait",
    "--max-epochs",
    "1",
    "--quiet",
    "--set",
    "run.telemetry=[]",
    "--set",
    "tasks.charlm.preset=impaired",
    "--set",
    "tasks.charlm.block_size=8",
    "--set",
    "tasks.charlm.max_chars=4000",
    "--set",
    "env.batch_size=16",
]

CORPORA = {
    # Before: a torch warning, then "math domain error" from the chance-level loss.
    "empty": (b"", "is empty; set tasks.charlm.path to a UTF-8 text file"),
    # Before: accepted, decoded with replacement characters and trained on.
    "binary": (bytes(range(256)) * 40, "is a binary file (it holds NUL bytes)"),
    "latin-1 or random bytes": (
        bytes(range(128, 256)) * 40,
        "is not UTF-8 text: 4,000 of the first 4,000 characters",
    ),
    # Before: accepted, and the run reported 100 % accuracy.
    "one character": (b"a" * 6000, "holds one distinct character ('a')"),
    "one character, newlines": (b"\n" * 6000, "holds one distinct character ('\\n')"),
}


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_a_corpus_nothing_can_be_learned_from_is_one_line(
    invoke: Invoke, tmp_path: Path, name: str
) -> None:
    content, message = CORPORA[name]
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(content)
    out = tmp_path / "run"
    result = invoke(*CHARLM, "--set", f"tasks.charlm.path={corpus}", "--out", str(out))
    line = failed_in_one_line(result)
    assert f"charlm corpus {corpus} " in line and message in line, line
    assert not (out / "checkpoint.pt").exists()


def test_a_text_with_a_few_undecodable_bytes_is_still_text(tmp_path: Path) -> None:
    """A stray Latin-1 byte in English prose is modelled as a replacement character, as
    before: the line is drawn at 1 % (this text has 0.4 %; French in Latin-1 has more,
    and is better converted than learned as replacement characters)."""
    from esper_tasks.charlm import CharLMOptions, CharLMTask

    corpus = tmp_path / "latin1.txt"
    paragraph = "The plain approach works well. " * 8 + "A na\xefve one does not. "
    corpus.write_bytes((paragraph * 20).encode("latin-1"))
    task = CharLMTask(CharLMOptions(path=str(corpus), max_chars=4000, block_size=8))
    assert "\ufffd" in task.vocab and len(task.text) == 4000


def test_one_huge_line_is_read_only_as_far_as_max_chars(tmp_path: Path) -> None:
    """Before: the whole file was read and decoded (a 48 MiB file held ~100 MiB) to keep
    its first max_chars characters."""
    corpus = tmp_path / "one-line.txt"
    chunk = b"abcdefgh " * ((1 << 20) // 9)  # whole words: the file repeats them
    with corpus.open("wb") as fh:
        for _ in range(48):
            fh.write(chunk)
    tracemalloc.start()
    try:
        text = read_text([corpus], 5000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert text == ("abcdefgh " * 600)[:5000]
    assert peak < 1 << 20, f"reading 5000 characters held {peak:,} bytes"


def test_one_huge_line_trains(invoke: Invoke, tmp_path: Path) -> None:
    corpus = tmp_path / "one-line.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog " * 20_000)
    result = invoke(*CHARLM, "--set", f"tasks.charlm.path={corpus}", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("char", ["\U0001f600", "\u00e9", "\u20ac"], ids=["4 bytes", "2", "3"])
def test_a_character_is_never_cut_in_half(tmp_path: Path, char: str) -> None:
    corpus = tmp_path / "wide.txt"
    corpus.write_text(("a" + char) * 3000, encoding="utf-8")
    assert read_text([corpus], 1001) == ("a" + char) * 500 + "a"
    assert read_text([corpus, corpus], 6001) == ("a" + char) * 3000 + "a"
