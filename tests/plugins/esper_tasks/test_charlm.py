"""tasks.charlm: corpus, vocabulary, contiguous splits, sequences, untrained perplexity."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from esper_tasks.charlm import CharLMOptions, CharLMTask
from esper_tasks.corpus import stdlib_sources

from esper_core.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def task() -> CharLMTask:
    return CharLMTask(CharLMOptions(max_chars=200_000, block_size=64))


def test_default_corpus_is_the_stdlib_in_sorted_order(task: CharLMTask) -> None:
    paths = stdlib_sources()
    assert all(p.suffix == ".py" and "site-packages" not in p.parts for p in paths)
    first = paths[0].read_bytes().decode("utf-8", errors="replace")
    assert task.text.startswith(first[:1000])
    assert len(task.text) == 200_000
    assert CharLMTask(CharLMOptions(max_chars=200_000)).text == task.text  # deterministic


def test_vocabulary_is_sorted_and_round_trips(task: CharLMTask) -> None:
    assert list(task.vocab) == sorted(set(task.text))
    assert task.num_classes == len(task.vocab)
    sample = task.text[1000:3000]
    ids = task.encode(sample)
    assert task.decode(ids) == sample
    assert task.decode(torch.tensor(ids)) == sample
    with pytest.raises(DataError, match="not in the charlm vocabulary"):
        task.encode("\u2603")


def test_contiguous_splits_and_shifted_targets(task: CharLMTask) -> None:
    (a, b), (c, d), (e, f) = task.split_bounds()
    assert (a, b == c, d == e, f) == (0, True, True, 200_000)
    assert b - a == 180_000 and d - c == 10_000 and f - e == 10_000
    data = task.load_data("cpu")
    bs = 64
    assert data.train.inputs.shape == ((180_000 - 1) // bs, bs)
    assert len(data.val) == (10_000 - 1) // bs and len(data.test) == (10_000 - 1) // bs
    assert torch.equal(data.train.inputs[:, 1:], data.train.targets[:, :-1])
    assert torch.equal(data.train.targets[:-1, -1], data.train.inputs[1:, 0])
    assert task.decode(data.val.inputs[0]) == task.text[c : c + bs]
    assert task.decode(data.test.targets[-1])[-1] == task.text[e + len(data.test) * bs]
    assert data.train.inputs.dtype == torch.int64


def test_custom_text_file(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 400, encoding="utf-8")
    task = CharLMTask(CharLMOptions(path=str(path), block_size=16))
    assert "".join(task.vocab) == " .abcdefghijklmnopqrstuvwxyz"
    assert len(task.load_data("cpu").val) > 0
    with pytest.raises(DataError, match="does not exist"):
        _ = CharLMTask(CharLMOptions(path=str(tmp_path / "missing.txt"))).text
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("ab" * 600)
    with pytest.raises(DataError, match="holds no sequence"):
        CharLMTask(CharLMOptions(path=str(tiny), block_size=64)).load_data("cpu")


def test_preset_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="n_segments"):
        CharLMTask(CharLMOptions(n_layer=3))
    with pytest.raises(ConfigError, match="n_head"):
        CharLMTask(CharLMOptions(d_model=30, n_head=4))


def test_untrained_perplexity_is_near_the_vocabulary_size(task: CharLMTask) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        host = CharLMTask(
            CharLMOptions(max_chars=200_000, block_size=64, preset="small")
        ).build_host()
    data = task.load_data("cpu")
    host.eval()
    with torch.no_grad():
        outputs = host(data.val.inputs[:32])
    m = task.metrics(outputs, data.val.targets[:32])
    assert int(m.count) == 32 * 64  # sums over tokens
    perplexity = math.exp(float(m.loss_sum) / int(m.count))
    assert task.num_classes / 2 < perplexity < 2 * task.num_classes
    assert task.chance_loss == pytest.approx(math.log(task.num_classes))
    assert float(task.loss(outputs, data.val.targets[:32])) == pytest.approx(
        float(m.loss_sum) / int(m.count), rel=1e-5
    )
