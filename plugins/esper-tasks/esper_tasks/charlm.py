"""``tasks.charlm``: a character-level language model over any text file.

Default corpus: the Python standard library's own ``.py`` sources (present on every
machine with Python), read in sorted path order and cut at ``max_chars``. The
vocabulary is the sorted set of characters of the corpus. The token stream is split
contiguously into train / validation / test and chunked into ``[N, block_size]``
sequences whose targets are the inputs shifted by one character.

Metrics: ``metrics()`` sums the cross-entropy and the correct next-character
predictions over every token; perplexity is ``exp(loss_sum / count)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import define, field

from esper_core import MeasuredCost, TaskContext, TaskData, TrainingWork, hookimpl
from esper_core.components.task import SlotSite
from esper_core.config_limits import MAX_CORPUS, MAX_HOST_WEIGHTS
from esper_core.converter import in_range, one_of, options_field
from esper_core.errors import DataError
from esper_core.recipe import TRANSFORMER_RECIPE, Recipe
from esper_tasks.common import CrossEntropyTask
from esper_tasks.presets import TransformerPreset, resolve_preset

if TYPE_CHECKING:
    from torch import nn

PRESETS: dict[str, TransformerPreset] = {
    "base": TransformerPreset(d_model=128, n_layer=4, n_head=4, n_segments=2),
    "small": TransformerPreset(d_model=64, n_layer=2, n_head=2, n_segments=2),
    "impaired": TransformerPreset(d_model=32, n_layer=2, n_head=2, n_segments=2),
}
_HOST_FIELDS = ("d_model", "n_layer", "n_head", "n_segments")
# Far beyond a character model one grows, low enough that no setting takes minutes to
# build or exhausts memory (each option's help says why).
MAX_BLOCK = 2048
MAX_D_MODEL = 4096
MAX_LAYERS = 128
MAX_HEADS = 256


@define
class CharLMOptions:
    path: str | None = options_field(
        None, doc="Text file to model (default: the Python standard library's .py sources)."
    )
    max_chars: int = options_field(
        1_000_000,
        in_range(1000, MAX_CORPUS, integer=True),
        "Characters of the corpus used (a cap), at most 100,000,000 (the text is held in "
        "memory and encoded as 8-byte tokens: 800 MB at the cap).",
    )
    block_size: int = options_field(
        128,
        in_range(2, MAX_BLOCK, integer=True),
        "Characters per training sequence (the context), at most 2048 (attention holds "
        "batch x heads x block_size^2 scores per layer: 4 GB at 2048, batch 64, 4 heads).",
    )
    val_fraction: float = options_field(
        0.05, in_range(0, 1, lo_open=True, hi_open=True), "Fraction of the stream for validation."
    )
    test_fraction: float = options_field(
        0.05, in_range(0, 1, lo_open=True, hi_open=True), "Fraction of the stream for test."
    )
    preset: str = options_field("base", one_of(*PRESETS), "Host preset: base, small or impaired.")
    d_model: int | None = options_field(
        None,
        in_range(1, MAX_D_MODEL, integer=True),
        "Override: model width, at most 4096 (the host as a whole is held to 100,000,000 "
        "weights, 12 x n_layer x d_model^2).",
    )
    n_layer: int | None = options_field(
        None,
        in_range(1, MAX_LAYERS, integer=True),
        "Override: blocks, at most 128 (every block runs in every batch).",
    )
    n_head: int | None = options_field(
        None,
        in_range(1, MAX_HEADS, integer=True),
        "Override: heads, at most 256; must divide d_model.",
    )
    n_segments: int | None = options_field(
        None,
        in_range(1, MAX_LAYERS, integer=True),
        "Override: segments (= slots), at most 128; must divide n_layer.",
    )

    def __esper_validate__(self) -> list[str]:
        problems = []
        if self.val_fraction + self.test_fraction >= 1:
            problems.append("val_fraction + test_fraction must leave training text")
        p = resolve_preset(PRESETS, self, _HOST_FIELDS)
        if p.d_model % p.n_head:
            problems.append(f"d_model {p.d_model} is not divisible by n_head {p.n_head}")
        if p.n_layer % p.n_segments:
            problems.append(f"n_layer {p.n_layer} is not divisible by n_segments {p.n_segments}")
        weights = 12 * p.n_layer * p.d_model**2
        if weights > MAX_HOST_WEIGHTS:
            problems.append(
                f"the host would have about {weights:,} weights (d_model {p.d_model}, n_layer "
                f"{p.n_layer}); at most {MAX_HOST_WEIGHTS:,}, or it takes minutes to build: "
                "lower d_model or n_layer"
            )
        return problems


@define
class CharLMTask(CrossEntropyTask):
    """Next-character prediction with a GPT-style transformer host."""

    name: ClassVar[str] = "charlm"
    description: ClassVar[str] = (
        "character-level language model (default corpus: Python's stdlib sources), transformer host"
    )
    Options: ClassVar[type] = CharLMOptions

    topology: ClassVar[str] = "transformer"
    # Judged by loss and perplexity (summaries, the size-sweep frontier), not accuracy.
    language_model: ClassVar[bool] = True
    default_max_epochs: ClassVar[int] = 30
    default_batch_size: ClassVar[int] = 64
    default_eval_batch_size: ClassVar[int] = 256
    # Seconds of one CPU thread a run takes, for the estimate of `esper compare --dry-run`:
    # measured by benchmarks/task_cost.py (BENCHMARKS.md, "What a run costs, per sample
    # and per GFLOP").
    measured_cost: ClassVar[MeasuredCost] = MeasuredCost(
        seconds_per_run=0.57, seconds_per_sample=0.00109, seconds_per_gflop=0.03
    )
    # Chosen on tuning seeds by validation loss (the plugin's README: what was tried).
    default_recipe: ClassVar[Recipe] = TRANSFORMER_RECIPE

    options: CharLMOptions = field(factory=CharLMOptions)
    context: TaskContext = field(factory=TaskContext)
    _text: str | None = field(default=None, init=False, repr=False)
    _vocab: tuple[str, ...] | None = field(default=None, init=False, repr=False)
    _index: dict[str, int] | None = field(default=None, init=False, repr=False)
    _cache: dict[str, TaskData] = field(factory=dict, init=False, repr=False)

    # ------------------------------------------------------------ corpus

    @property
    def text(self) -> str:
        """The corpus (read once, on first use)."""
        if self._text is None:
            from esper_tasks.corpus import check_text, read_text, stdlib_sources

            if self.options.path is None:
                self._text = read_text(stdlib_sources(), self.options.max_chars)
            else:
                path = Path(self.options.path).expanduser()
                if not path.is_file():
                    # /dev/zero, a directory, a FIFO exist: "does not exist" would mislead.
                    what = (
                        "is not a regular file (a directory, a device or a pipe)"
                        if path.exists()
                        else "does not exist"
                    )
                    raise DataError(
                        f"charlm corpus {path} {what}; set tasks.charlm.path to a text "
                        "file, or unset it to use the Python standard library's sources"
                    )
                text = read_text([path], self.options.max_chars)
                # Checked before anything is built from it: an empty corpus made a host
                # of vocabulary 0 and then a math domain error, one of one character
                # reported 100 % accuracy.
                check_text(text, str(path))
                self._text = text
        return self._text

    @property
    def vocab(self) -> tuple[str, ...]:
        """The sorted characters of the corpus; token ``i`` is ``vocab[i]``."""
        if self._vocab is None:
            self._vocab = tuple(sorted(set(self.text)))
        return self._vocab

    def _char_index(self) -> dict[str, int]:
        if self._index is None:
            self._index = {ch: i for i, ch in enumerate(self.vocab)}
        return self._index

    @property
    def num_classes(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; every character must be in the vocabulary."""
        index = self._char_index()
        try:
            return [index[ch] for ch in text]
        except KeyError as exc:
            raise DataError(f"character {exc.args[0]!r} is not in the charlm vocabulary") from None

    def decode(self, ids: Any) -> str:
        """The text of token ids (a list or a tensor)."""
        vocab = self.vocab
        values = ids.tolist() if hasattr(ids, "tolist") else ids
        return "".join(vocab[i] for i in values)

    # ------------------------------------------------------------ host and data

    @property
    def preset(self) -> TransformerPreset:
        return resolve_preset(PRESETS, self.options, _HOST_FIELDS)

    def build_host(self) -> nn.Module:
        from esper_tasks.hosts.transformer import TransformerHost

        p = self.preset
        return TransformerHost(
            vocab_size=self.num_classes,
            block_size=self.options.block_size,
            d_model=p.d_model,
            n_layer=p.n_layer,
            n_head=p.n_head,
            n_segments=p.n_segments,
        )

    def split_bounds(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """``[start, stop)`` character offsets of the train, validation and test streams."""
        n = len(self.text)
        n_val = round(n * self.options.val_fraction)
        n_test = round(n * self.options.test_fraction)
        n_train = n - n_val - n_test
        return (0, n_train), (n_train, n_train + n_val), (n_train + n_val, n)

    def training_work(self) -> TrainingWork:
        """What an epoch of the bare host computes: sequences of each split and one
        sequence's training FLOPs (reads the corpus for its vocabulary, builds nothing)."""
        from esper_tasks.host_flops import transformer_train_flops

        bs = self.options.block_size
        train, val, test = (max(0, (stop - start - 1) // bs) for start, stop in self.split_bounds())
        flops = transformer_train_flops(self.num_classes, bs, self.preset)
        return TrainingWork(train, val, test, flops_per_sample=flops)

    def slot_sites(self) -> tuple[SlotSite, ...]:
        """The bare host's slots and the tokens each sits on (growth's price in the estimate)."""
        from esper_tasks.host_flops import transformer_slot_sites

        return transformer_slot_sites(self.preset, self.options.block_size)

    def grown_flops_per_sample(self, width: float, depth: int) -> float:
        """One sequence's training FLOPs once the host grew ``width`` x wide, ``depth`` x deep."""
        from esper_tasks.host_flops import grown_transformer, transformer_train_flops

        grown = grown_transformer(self.preset, width, depth)
        return transformer_train_flops(self.num_classes, self.options.block_size, grown)

    def _load_cpu(self) -> TaskData:
        import torch

        from esper_core.env.data import TensorSplit

        stream = torch.tensor(self.encode(self.text), dtype=torch.int64)
        bs = self.options.block_size

        def chunks(start: int, stop: int) -> TensorSplit:
            part = stream[start:stop]
            n = (len(part) - 1) // bs
            if n < 1:
                raise DataError(
                    f"a charlm split of {len(part)} characters holds no sequence of "
                    f"{bs + 1}; use more text or a smaller block_size"
                )
            inputs = part[: n * bs].reshape(n, bs).contiguous()
            targets = part[1 : n * bs + 1].reshape(n, bs).contiguous()
            return TensorSplit(inputs, targets)

        train, val, test = (chunks(*bounds) for bounds in self.split_bounds())
        return TaskData(train=train, val=val, test=test)


@hookimpl
def esper_register_tasks(register: Any) -> None:
    register(CharLMTask)
