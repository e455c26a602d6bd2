"""Every command README.md and docs/ show is run here, or listed here as not run with why.

The documented scale of most commands takes minutes (a 30-epoch run, a 20-update PPO
training, a comparison of 90 runs); each is run as documented with :data:`TINY` options
appended (the last value of an option wins, so ``--updates 20`` then ``--updates 1`` is
one update), and a comparison with ``--dry-run`` (every config and option of every cell is
checked, nothing trained). A command that is not run at all (it needs CUDA, or it is the
install this test runs in) is still parsed by its click command, so a renamed or removed
flag fails, and every example file it names must exist.

Commands run in this process (click's CliRunner, no interpreter start per command), in
a working directory of their own that sees the repository's ``examples/`` through a link,
so ``runs/...`` paths land in a temporary directory. A command that reads what another
documented command wrote (``--policy ppo:runs/ppo/checkpoint.pt``) names it in
``needs``: that one runs first, at its tiny scale.
"""

from __future__ import annotations

import ast
import json
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from attrs import frozen
from click.testing import CliRunner

from esper_cli.main import build_cli
from tests.cli.docs_commands import (
    documented_commands,
    existing_paths,
    pip_installs,
    untagged_commands,
)
from tests.plugin_set import REPO, plugin_manager

# Each run as short as it can be and still be the documented command: two epochs of two
# batches, one PPO update from one episode per env, no greedy checks during training.
EPOCHS = ("--max-epochs", "2", "--set", "env.max_batches=2")
PPO = ("--updates", "1", "--set", "policies.ppo.rollout_episodes=1", "--set", "train.eval_every=0")
GLYPHS = tuple(a for n in ("n_train", "n_val", "n_test") for a in ("--set", f"tasks.glyphs.{n}=64"))
CHARLM = ("--set", "tasks.charlm.max_chars=20000")
TINY = EPOCHS


@frozen
class Run:
    """Run as documented, ``tiny`` appended; ``needs``: the documented command whose
    output it reads; ``placeholder``: a doc's ``<run>`` and the directory put in its place."""

    tiny: tuple[str, ...] = TINY
    needs: str | None = None
    placeholder: tuple[str, str] | None = None
    # A known drift between the doc and the code, until fixed (a strict xfail: the fix
    # makes it pass, which fails until this is removed).
    broken: str | None = None


@frozen
class DryRun:
    """``esper compare`` with ``--dry-run``: ``why`` the documented run is not made, which
    the dry run confirms (it counts ``runs``)."""

    runs: int
    why: str = "a full comparison: {runs} runs"
    needs: str | None = None


@frozen
class NotRun:
    """Not run, for ``why``; parsed by its command (esper) or its argparse flags (a
    script), and the files it names exist."""

    why: str


@frozen
class RunElsewhere:
    """Run by ``test`` (FILE::NAME), at the documented scale or near it."""

    test: str


@frozen
class Script:
    """A Python script a doc shows in full (a ```python block after ``marker``), written
    to ``name`` and run on ``input_`` (a file this test makes in the format it reads)."""

    name: str
    marker: str
    input_: str


Way = Run | DryRun | NotRun | RunElsewhere | Script

SETUP_RUN = "esper run --out runs/run --max-epochs 2 --set env.max_batches=2"
PPO_DIGITS = "esper train --task digits --set tasks.digits.preset=impaired --out runs/ppo-digits"
PPO_SLOTS = (
    "esper train --task digits --set tasks.digits.preset=impaired "
    "--set policies.ppo.network=slots --out runs/ppo-slots"
)

# The chain that trained ppo:pretrained (docs/results/ppo-pretrained.md): 37 minutes of
# training, so each stage is parsed (flags and values), not run.
_PINNED_CNN = (
    '--set \'env.blueprints=["cnn/noop","cnn/norm","cnn/attention","cnn/depthwise",'
    '"cnn/bottleneck","cnn/conv_small","cnn/conv_light","cnn/conv_heavy","cnn/conv_layer",'
    '"cnn/widen","cnn/widen4x"]\' --set policies.ppo.network=slots '
    "--set policies.ppo.hidden_size=64 --set policies.ppo.target_kl=0.03"
)
PRETRAINED_A = (
    f"esper train --task digits --set tasks.digits.preset=impaired {_PINNED_CNN} "
    "--seed 200 --updates 20 --out runs/pretrained-a"
)
PRETRAINED_B = (
    f"esper train --task digits --set tasks.digits.preset=small {_PINNED_CNN} "
    "--set policies.ppo.init_from=runs/pretrained-a --seed 201 --updates 10 --out runs/pretrained-b"
)
PRETRAINED_C = (
    "esper train --task glyphs --set tasks.glyphs.n_blocks=4 --set tasks.glyphs.n_train=2000 "
    f"--set tasks.glyphs.n_val=1000 --set tasks.glyphs.n_test=1000 {_PINNED_CNN} "
    "--set policies.ppo.rollout_episodes=2 --set train.eval_every=0 "
    "--set policies.ppo.init_from=runs/pretrained-b --seed 202 --updates 4 --out runs/pretrained-c"
)
PRETRAINED_WHY = (
    "a stage of the 37-minute training chain of ppo:pretrained; init_from is tested in "
    "tests/plugins/esper_tamiyo_ppo/test_init_from.py"
)
GROWER_WIDEN_WHY = (
    "130 or 90 runs of a user's model through the Grower; its --smoke mode runs in "
    "tests/integration/test_benchmark_smoke.py"
)
PRETRAINED_GROWER_WHY = (
    "30 runs of a user's model through the Grower; its --smoke mode runs in "
    "tests/integration/test_benchmark_smoke.py"
)

# The modules of the reader's own that a doc's command imports (``tasks.dataset``'s model
# and data), written into the working directory: a small CNN with the slots the commands
# name, and 8x8 images in two classes.
_DATA = """
import torch
from torch.utils.data import TensorDataset


def splits():
    g = torch.Generator().manual_seed(0)

    def split(n):
        x = torch.randn(n, 1, 8, 8, generator=g)
        return TensorDataset(x, (x.mean((1, 2, 3)) > 0).long())

    return split(64), split(32), split(32)
"""
_MODEL = """
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2))

    def forward(self, x):
        return self.head(self.layer2(self.layer1(x)))
"""
MODULES = {
    "mymodel.py": _DATA + _MODEL + "\n\ndef build():\n    return Net()\n",
    "mypkg/__init__.py": "",
    "mypkg/data.py": _DATA,
    "mypkg/models.py": _MODEL + "\n\ndef resnet():\n    return Net()\n",
}


def _sixth_recipe(seed: int, study: int) -> str:
    """The PPO suite's sixth study's command (the seventh repeats it on retuned pairs)."""
    return (
        f"esper train --suite examples/suites/controller-suite.toml --seed {seed} --envs 18 "
        "--updates 29 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.advantage_groups=pair "
        "--set policies.ppo.min_epoch=1 --set policies.ppo.host_growth_min_at=0.125 "
        "--set rewards.pbrs.flops_rent_weight=0.02 --set train.eval_every=8 "
        "--set 'train.eval_seeds=[100000,100001,100002,100003,100004,100005,100006,"
        "100007,100008,100009,100010,100011,100012,100013,100014,100015,100016,100017]' "
        f"--out runs/ppo-suite-{study}/run-1"
    )


_LONG_PPO = NotRun(
    "1,044 episodes, hours of one core; a mixed run end to end in tests/core/test_mixed_training.py"
)
_CONTROLLER_EVALUATION = NotRun(
    "1,650 evaluation runs after 580 tuning and 1,620 menu runs; --only at the smallest "
    "scale in tests/cli/test_benchmark_only.py"
)
_PPO_SUITE_TRAINING = NotRun(
    "2,160-4,320 episodes a run, hours of one core; mixed training pairs in "
    "tests/core/test_mixed_training.py"
)

COMMANDS: dict[str, Way] = {
    # README.md: set up
    "python3.11 -m venv .venv": NotRun("the documented install: this test runs inside it"),
    ".venv/bin/esper run": Run(),
    ".venv/bin/python -m pytest -n 2": NotRun("the test suite itself, this test included"),
    # README.md and docs/tour.md: the tour
    "esper run --task glyphs --set tasks.glyphs.preset=large": Run(TINY + GLYPHS),
    "esper run --task charlm": Run(TINY + CHARLM),
    "esper run --policy wait": Run(),
    "esper run --set policies.heuristic.trigger=capacity": Run(),
    "esper run --plugin rewards.shaped --episodes 3": Run(),
    "esper run --resume 'runs/<run>'": Run((), placeholder=("runs/<run>", "runs/run")),
    "esper report 'runs/<run>'": Run((), placeholder=("runs/<run>", "runs/run")),
    "esper train --policy ppo --envs 4 --updates 20 --out runs/ppo": Run(TINY + PPO),
    # README.md: the PPO quick start (about 75 s of one core; docs/tour.md's test skips it)
    (
        "esper train --policy ppo --envs 2 --updates 3 --max-epochs 10 "
        "--set policies.ppo.rollout_episodes=2 --out runs/ppo-quick"
    ): Run(TINY + PPO),
    "esper run --policy ppo:runs/ppo/checkpoint.pt": Run(
        needs="esper train --policy ppo --envs 4 --updates 20 --out runs/ppo"
    ),
    "esper compare examples/main-job-digits.toml --jobs 2": DryRun(54),
    # docs/results/main-job-fair-rate.md: the tour's A/B at a fair rate
    "esper compare examples/main-job-fair-rate.toml --jobs 2": DryRun(90),
    # docs/results/heuristic-expansion.md: the gradient-based trigger on digits, and the
    # choice of its ratio on the controller suite's training pairs
    "esper compare examples/heuristic-expansion-digits.toml --jobs 2": DryRun(40),
    "esper compare examples/heuristic-expansion-default.toml --jobs 2": DryRun(40),
    "esper compare examples/heuristic-expansion-tuning.toml --jobs 2": DryRun(18),
    "esper compare examples/heuristic-expansion-tuning-mlp.toml --jobs 2": DryRun(18),
    "esper compare examples/heuristic-expansion-tuning-cnn.toml --jobs 2": DryRun(18),
    # docs/results/growth-charlm-300k-budget.md: the smaller start under the tuning rule
    "esper compare examples/growth-charlm-300k-rule.toml --jobs 2": DryRun(70),
    "esper compare examples/depth-glyphs-rule.toml --jobs 2": DryRun(100),
    "esper compare examples/recipes-glyphs.toml --jobs 2": DryRun(220),
    "esper compare examples/compare-digits.toml --runner ray": DryRun(
        30, "a comparison of {runs} runs on Ray: a private instance starts a Ray cluster"
    ),
    "esper run --policy static --set 'policies.static.seeds=[\"conv_heavy@r0c0\"]'": Run(),
    "esper run --task glyphs --policy schedule --set tasks.glyphs.slots_before_pool=true "
    "--set 'env.blueprints=[\"conv_layer\"]' "
    '--set \'policies.schedule.seeds=["conv_layer@r0c0","conv_layer@r0c1"]\'': Run(TINY + GLYPHS),
    "esper run --task glyphs --policy static --set policies.static.widen_at=0.25 "
    "--set policies.static.widen_factor=2": Run(TINY + GLYPHS),
    # The growth born at epoch 0 of 2 at alpha 1/2, folded after it (tempo 2).
    "esper run --task charlm --policy static --set tasks.charlm.preset=small "
    "--set policies.static.widen_at=0.25 --set policies.static.widen_factor=2": Run(
        (*TINY, *CHARLM, "--set", "policies.static.widen_tempo=2")
    ),
    # The depth growth born at epoch 0 of 2 at alpha 1/2, folded after it (tempo 2).
    "esper run --task charlm --policy static --set tasks.charlm.preset=small "
    "--set policies.static.deepen_at=0.2 --set policies.static.deepen_mode=stack": Run(
        (*TINY, *CHARLM, "--set", "policies.static.deepen_tempo=2")
    ),
    # A CNN's stages deepened, born at epoch 0 of 2 at alpha 1/2, folded after it.
    "esper run --task glyphs --policy static --set tasks.glyphs.preset=small "
    "--set policies.static.deepen_at=0.25 --set policies.static.deepen_mode=identity": Run(
        (*TINY, *GLYPHS, "--set", "policies.static.deepen_tempo=2")
    ),
    # The heuristic's trigger made to fire at epoch 1 of 2 (a one-epoch window, any drop).
    "esper run --task charlm --policy heuristic --set tasks.charlm.preset=small "
    "--set policies.heuristic.host_growth=widen": Run(
        (
            *TINY,
            *CHARLM,
            *("--set", "policies.heuristic.host_growth_window=1"),
            *("--set", "policies.heuristic.host_growth_drop=10"),
            *("--set", "policies.heuristic.host_growth_tempo=1"),
        )
    ),
    "esper plugins": Run(()),
    "esper blueprints --topology cnn": Run(()),
    "esper blueprints check": Run(()),
    "esper config show --set run.seed=3": Run(()),
    "esper config show --all": Run(()),
    # docs/executors.md
    "esper run --executor streams --device cuda --envs 4": NotRun("needs a CUDA device"),
    "esper train --executor streams --device cuda:0 --envs 8 --policy ppo": NotRun(
        "needs a CUDA device"
    ),
    "esper run --executor streams --devices cuda:0 --devices cuda:1 --envs 8": NotRun(
        "needs two CUDA devices"
    ),
    "esper train --executor distributed --nproc 2 --device cuda --envs 8": NotRun(
        "needs two CUDA devices"
    ),
    "esper run --executor distributed --nproc 4 --envs 8": NotRun(
        "starts 4 worker interpreters (about a minute of CPU to import torch four times); "
        "tests/plugins/esper_streams runs the distributed executor on gloo"
    ),
    "esper train --executor distributed --device cuda --envs 16 --out runs/big": NotRun(
        "torchrun on two machines with two CUDA devices each"
    ),
    # docs/own-model.md
    "python examples/own_model_resnet18.py": RunElsewhere(
        "tests/integration/test_own_model_example.py::"
        "test_the_resnet18_example_runs_and_saves_a_resumable_state"
    ),
    "python examples/own_model_resnet18.py --policy random": RunElsewhere(
        "tests/integration/test_own_model_example.py::"
        "test_the_resnet18_example_runs_and_saves_a_resumable_state"
    ),
    "python examples/own_model_mlp.py": RunElsewhere(
        "tests/integration/test_own_model_example.py::test_the_mlp_example_grows_and_says_why"
    ),
    "python examples/own_model_spirals.py": RunElsewhere(
        "tests/integration/test_own_model_spirals.py::"
        "test_the_default_heuristic_grows_the_too_small_model_and_keeps_the_seed"
    ),
    "python examples/own_model_spirals.py --policy wait": RunElsewhere(
        "tests/integration/test_own_model_spirals.py::"
        "test_without_growth_the_same_loop_keeps_the_model_as_it_was"
    ),
    "python examples/own_model_spirals.py --layers 2 --hidden 32 --policy wait": RunElsewhere(
        "tests/integration/test_own_model_spirals.py::"
        "test_the_example_builds_the_static_model_of_the_grown_size"
    ),
    # docs/results/heuristic-expansion.md
    "python benchmarks/expansion_trace.py spirals --hidden 16 --seed 0 --rescale 4": NotRun(
        "a 24-30 epoch diagnostic; test_benchmark_smoke.py runs the script in --smoke mode"
    ),
    "python benchmarks/expansion_trace.py tabular --hidden 64 --seed 0 --rescale 4": NotRun(
        "a 24-30 epoch diagnostic; test_benchmark_smoke.py runs the script in --smoke mode"
    ),
    "python benchmarks/own_model_spirals.py --seeds 1000-1009": NotRun(
        "20 training runs of 24 epochs (minutes); test_own_model_spirals.py runs its "
        "measurement on one random seed"
    ),
    "python benchmarks/own_model_spirals.py --seeds 1000-1009 --layers 2 --hidden 32": NotRun(
        "20 training runs of 24 epochs (minutes); test_own_model_spirals.py runs its "
        "measurement on one random seed"
    ),
    (
        "esper run --task dataset --policy wait --seed 3 --set env.max_epochs=6 "
        "--set tasks.dataset.model=mymodel:build --set tasks.dataset.data=mymodel:splits "
        '--set \'tasks.dataset.slots=["1", "3"]\' --set \'tasks.dataset.topology="mlp"\' '
        "--set tasks.dataset.batch_size=16 --set 'training.optimizer=\"sgd\"' "
        "--set training.lr=0.1 --set training.nesterov=true --set training.weight_decay=5e-4 "
        "--set 'training.schedule=\"cosine\"' --set training.grad_clip=0.5"
    ): NotRun(
        "needs the reader's mymodel.py; tests/integration/test_grower_one_answer.py runs "
        "this run and its loop on a mymodel.py of its own and finds them equal"
    ),
    # docs/recipes.md
    (
        "esper run --set 'training.optimizer=\"sgd\"' --set training.lr=0.01 "
        "--set training.nesterov=false --set 'training.schedule=\"constant\"' "
        "--set training.decay_norms_and_biases=true"
    ): Run(),
    # docs/results/ppo-glyphs.md
    "esper train --task glyphs --out runs/ppo-glyphs-default": Run(TINY + PPO + GLYPHS),
    "esper compare examples/ppo-glyphs-default.toml --jobs 2": DryRun(
        70,
        needs="esper train --task glyphs --out runs/ppo-glyphs-default",
    ),
    "esper compare examples/ppo-glyphs-default-transfer-base.toml --jobs 2": DryRun(
        40,
        needs="esper train --task glyphs --out runs/ppo-glyphs-default",
    ),
    ".venv/bin/esper train --task glyphs --updates 10 --out runs/ppo-glyphs": Run(
        TINY + PPO + GLYPHS
    ),
    ".venv/bin/esper compare examples/ppo-glyphs.toml --jobs 2": DryRun(
        70,
        needs=".venv/bin/esper train --task glyphs --updates 10 --out runs/ppo-glyphs",
    ),
    ".venv/bin/esper compare examples/ppo-glyphs-transfer-base.toml --jobs 2": DryRun(
        30,
        needs=".venv/bin/esper train --task glyphs --updates 10 --out runs/ppo-glyphs",
    ),
    ".venv/bin/python paired.py runs/ppo-glyphs-compare/results.json ppo heuristic": Script(
        "paired.py", "import json, sys", "runs/ppo-glyphs-compare/results.json"
    ),
    # docs/results/ppo-glyphs.md: three training runs
    "esper train --task glyphs --seed 200 --out runs/ppo-glyphs-s200": Run(TINY + PPO + GLYPHS),
    "esper train --task glyphs --seed 201 --out runs/ppo-glyphs-s201": NotRun(
        "the seed-200 command with another training seed"
    ),
    "esper train --task glyphs --seed 202 --out runs/ppo-glyphs-s202": NotRun(
        "the seed-200 command with another training seed"
    ),
    "esper compare examples/ppo-glyphs-runs.toml --jobs 2": NotRun(
        "it needs the three trained checkpoints; test_every_example_experiment_plans plans it"
    ),
    # docs/growth.md: PPO chooses the moment of the host's growth
    (
        "esper train --task digits --set training.lr=0.4 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.host_growth_factor=4"
    ): Run(TINY + PPO),
    # docs/results/host-growth-digits.md: three PPO training runs that may grow the host
    (
        "esper train --task digits --set training.lr=0.4 --set policies.ppo.host_growth=widen "
        "--set policies.ppo.host_growth_factor=4 --seed 200 --out runs/ppo-hg-digits-s200"
    ): Run(TINY + PPO),
    (
        "esper train --task digits --set training.lr=0.4 --set policies.ppo.host_growth=widen "
        "--set policies.ppo.host_growth_factor=4 --seed 201 --out runs/ppo-hg-digits-s201"
    ): NotRun("the seed-200 command with another training seed"),
    (
        "esper train --task digits --set training.lr=0.4 --set policies.ppo.host_growth=widen "
        "--set policies.ppo.host_growth_factor=4 --seed 202 --out runs/ppo-hg-digits-s202"
    ): NotRun("the seed-200 command with another training seed"),
    # docs/results/controller-benchmark.md
    "esper benchmark examples/suites/controller-suite.toml --jobs 2": NotRun(
        "1,015 runs; one split end to end at the smallest scale in "
        "tests/integration/test_controller_benchmark.py"
    ),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=7100 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown"
    ): NotRun("530 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=7600 "
        "--only heuristic --only ppo4-run-1 --only ppo4-run-2 --only ppo4-run-3 "
        "--only ppo5-run-1 --only ppo5-run-2 --only ppo5-run-3"
    ): NotRun("680 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=7900 "
        "--only heuristic"
    ): NotRun("920 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8200 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo10-run-1 --only ppo10-run-2 --only ppo10-run-3"
    ): NotRun(
        "1,620 evaluation runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"
    ),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8500 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo11-run-1 --only ppo11-run-2 --only ppo11-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8600 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo12-run-1 --only ppo12-run-2 --only ppo12-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8700 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo13-run-1 --only ppo13-run-2 --only ppo13-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8800 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo14-run-1 --only ppo14-run-2 --only ppo14-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8900 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo15-run-1 --only ppo15-run-2 --only ppo15-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9000 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo16-run-1 --only ppo16-run-2 --only ppo16-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9100 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo17-run-1 --only ppo17-run-2 --only ppo17-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9200 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo18-run-1 --only ppo18-run-2 --only ppo18-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9300 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo19-run-1 --only ppo19-run-2 --only ppo19-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9400 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo20-run-1 --only ppo20-run-2 --only ppo20-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9500 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo21-run-1 --only ppo21-run-2 --only ppo21-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9600 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo22-run-1 --only ppo22-run-2 --only ppo22-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=9700 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo23-run-1 --only ppo23-run-2 --only ppo23-run-3"
    ): _CONTROLLER_EVALUATION,
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8400 "
        "--only heuristic --only heuristic-capacity --only heuristic-expansion "
        "--only heuristic-slowdown --only heuristic-widen-slowdown --only heuristic-widen-at-once "
        "--only heuristic-early-cnn-depth --only ppo10-run-1 --only ppo10-run-2 --only ppo10-run-3"
    ): NotRun(
        "1,630 evaluation runs after 580 tuning and 1,620 menu runs; --only at the smallest "
        "scale in tests/cli/test_benchmark_only.py"
    ),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8300 "
        "--only heuristic --only heuristic-widen-at-once --only heuristic-early-cnn-depth "
        "--only ppo10-run-1 --only ppo10-run-2 --only ppo10-run-3"
    ): NotRun(
        "1,060 evaluation runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"
    ),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8200 "
        "--only heuristic --only ppo10-run-1 --only ppo10-run-2 --only ppo10-run-3"
    ): NotRun(
        "780 evaluation runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"
    ),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 1 --set run.seed=8100 "
        "--only heuristic"
    ): NotRun("230 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 1 --set run.seed=8100 "
        "--only heuristic --only ppo10-run-1 --only ppo10-run-2 --only ppo10-run-3"
    ): NotRun("500 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --set run.seed=8000 "
        "--only heuristic --only ppo9-run-1 --only ppo9-run-2 --only ppo9-run-3"
    ): NotRun("500 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --only heuristic "
        "--only heuristic-capacity --only heuristic-widen-slowdown"
    ): NotRun("370 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --only heuristic "
        "--only heuristic-capacity --only heuristic-widen-at-once"
    ): NotRun("370 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    (
        "esper benchmark examples/suites/controller-suite.toml --jobs 2 --only heuristic "
        "--only heuristic-capacity --only heuristic-expansion --only heuristic-slowdown "
        "--only heuristic-widen-slowdown --only heuristic-widen-at-once --only ppo-pretrained "
        "--only ppo6-run-1 --only ppo6-run-2 --only ppo6-run-3"
    ): NotRun("1,040 runs; --only at the smallest scale in tests/cli/test_benchmark_only.py"),
    # docs/results/ppo-suite.md
    "esper benchmark examples/suites/controller-suite.toml --split training --until tuning": (
        NotRun(
            "75 runs; the tuning phase alone at the smallest scale in "
            "tests/integration/test_controller_benchmark.py"
        )
    ),
    (
        "esper train --suite examples/suites/controller-suite.toml --seed 300 --envs 8 "
        "--updates 63 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set rewards.pbrs.flops_rent_weight=0.04 "
        "--set train.eval_every=8 --set 'train.eval_seeds=[100000,100001,100002,100003,"
        "100004,100005,100006,100007,100008,100009]' --out runs/ppo-suite/run-1"
    ): NotRun(
        "1,008 episodes, hours of one core; a mixed run end to end in "
        "tests/core/test_mixed_training.py"
    ),
    (
        "esper train --suite examples/suites/controller-suite.toml --seed 400 --envs 10 "
        "--updates 50 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.advantage_groups=pair "
        "--set rewards.pbrs.flops_rent_weight=0.01 --set train.eval_every=10 "
        "--set 'train.eval_seeds=[100000,100001,100002,100003,100004,100005,100006,"
        "100007,100008,100009]' --out runs/ppo-suite-2/run-1"
    ): NotRun(
        "1,000 episodes, hours of one core; a mixed run end to end in "
        "tests/core/test_mixed_training.py"
    ),
    (
        "esper train --suite examples/suites/controller-suite.toml --seed 500 --envs 10 "
        "--updates 50 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.advantage_groups=pair "
        "--set rewards.pbrs.flops_rent_weight=0.02 --set train.eval_every=10 "
        "--set 'train.eval_seeds=[100000,100001,100002,100003,100004,100005,100006,"
        "100007,100008,100009]' --out runs/ppo-suite-3/run-1"
    ): NotRun(
        "1,000 episodes, hours of one core; a mixed run end to end in "
        "tests/core/test_mixed_training.py"
    ),
    (
        "esper train --suite examples/suites/controller-suite.toml --seed 600 --envs 16 "
        "--updates 32 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.advantage_groups=pair "
        "--set policies.ppo.min_epoch=1 --set policies.ppo.host_growth_min_at=0.125 "
        "--set rewards.pbrs.flops_rent_weight=0.02 --set train.eval_every=8 "
        "--set 'train.eval_seeds=[100000,100001,100002,100003,100004,100005,100006,"
        "100007,100008,100009,100010,100011,100012,100013,100014,100015]' "
        "--out runs/ppo-suite-4/run-1"
    ): NotRun(
        "1,024 episodes, hours of one core; a mixed run end to end in "
        "tests/core/test_mixed_training.py"
    ),
    (
        "esper train --suite examples/suites/controller-suite.toml --seed 4100 --envs 16 "
        "--updates 32 --set policies.ppo.network=slots --set policies.ppo.hidden_size=64 "
        "--set policies.ppo.target_kl=0.03 --set policies.ppo.rollout_episodes=2 "
        "--set policies.ppo.host_growth=widen --set policies.ppo.advantage_groups=pair "
        "--set policies.ppo.min_epoch=1 --set policies.ppo.host_growth_min_at=0.125 "
        "--set rewards.pbrs.flops_rent_weight=0.04 --set train.eval_every=8 "
        "--set 'train.eval_seeds=[100000,100001,100002,100003,100004,100005,100006,"
        "100007,100008,100009,100010,100011,100012,100013,100014,100015]' "
        "--out runs/ppo-suite-5/run-1"
    ): NotRun(
        "1,024 episodes, hours of one core; a mixed run end to end in "
        "tests/core/test_mixed_training.py"
    ),
    _sixth_recipe(10000, 6): _LONG_PPO,
    _sixth_recipe(20000, 7): _LONG_PPO,
    (
        "esper train --config docs/results/ppo-suite-8/config.toml --seed 40000 "
        "--out runs/ppo-suite-8/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; seed groups end to end in "
        "tests/core/test_seed_groups.py"
    ),
    (
        "esper train --config docs/results/ppo-suite-9/config.toml --seed 50000 "
        "--out runs/ppo-suite-9/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; auto host growth end to end in "
        "tests/plugins/esper_tamiyo_ppo/test_host_growth.py"
    ),
    (
        "esper train --config docs/results/ppo-suite-10/config.toml --seed 60000 "
        "--out runs/ppo-suite-10/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; auto host growth end to end in "
        "tests/plugins/esper_tamiyo_ppo/test_host_growth.py"
    ),
    (
        "esper train --config docs/results/ppo-suite-11/config.toml --seed 63000 "
        "--out runs/ppo-suite-11/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; auto host growth end to end in "
        "tests/plugins/esper_tamiyo_ppo/test_host_growth.py"
    ),
    (
        "esper train --config docs/results/ppo-suite-12/config.toml --seed 66000 "
        "--out runs/ppo-suite-12/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; the compute price in "
        "tests/plugins/esper_rewards/ (flops_rent)"
    ),
    (
        "esper train --config docs/results/ppo-suite-13/config.toml --seed 69000 "
        "--out runs/ppo-suite-13/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; the compute price in "
        "tests/plugins/esper_rewards/ (flops_rent)"
    ),
    (
        "esper train --config docs/results/ppo-suite-14/config.toml --seed 72000 "
        "--out runs/ppo-suite-14/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; the compute price in "
        "tests/plugins/esper_rewards/ (flops_rent, its timing)"
    ),
    (
        "esper train --config docs/results/ppo-suite-15/config.toml --seed 75000 "
        "--out runs/ppo-suite-15/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; the compute price in "
        "tests/plugins/esper_rewards/ (flops_rent, its timing)"
    ),
    (
        "esper train --config docs/results/ppo-suite-16/config.toml --seed 78000 "
        "--out runs/ppo-suite-16/run-1"
    ): NotRun(
        "1,080 episodes, hours of one core; mixed training pairs in "
        "tests/core/test_mixed_training.py"
    ),
    (
        "python benchmarks/controller_cells.py "
        "docs/results/controller-benchmark-evaluation/cells-9000.tar.gz --arm ppo16-run-1 "
        "--arm ppo16-run-2 --arm ppo16-run-3 --markdown"
    ): RunElsewhere(
        "tests/integration/test_controller_cells.py::"
        "test_the_documented_command_reads_the_kept_cells"
    ),
    (
        "esper train --config docs/results/ppo-suite-17/config.toml --seed 81000 "
        "--out runs/ppo-suite-17/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-18/config.toml --seed 84000 "
        "--out runs/ppo-suite-18/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-19/config.toml --seed 87000 "
        "--out runs/ppo-suite-19/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-20/config.toml --seed 90000 "
        "--out runs/ppo-suite-20/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-21/config.toml --seed 93000 "
        "--out runs/ppo-suite-21/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-22/config.toml --seed 96000 "
        "--out runs/ppo-suite-22/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "esper train --config docs/results/ppo-suite-23/config.toml --seed 101000 "
        "--out runs/ppo-suite-23/run-1"
    ): _PPO_SUITE_TRAINING,
    (
        "python benchmarks/ppo_price_break_even.py runs/ppo-suite-11/run-1 "
        "runs/ppo-suite-11/run-2 runs/ppo-suite-11/run-3 --markdown"
    ): NotRun(
        "it needs the three training runs (docs/results/ppo-suite-11/run-N.tar.gz); the "
        "script's --smoke runs in test_benchmark_smoke.py"
    ),
    (
        "python benchmarks/ppo_training_episodes.py runs/ppo-suite-5/run-1 "
        "runs/ppo-suite-5/run-2 runs/ppo-suite-5/run-3 --block 8 --markdown"
    ): NotRun(
        "it needs the three training runs (docs/results/ppo-suite-5/run-N.tar.gz); the "
        "script's --smoke runs in test_benchmark_smoke.py"
    ),
    (
        "python benchmarks/ppo_pretrained_grower.py --model cnn --seeds 3000-3009 "
        "--policy ppo:pretrained --policy heuristic --policy wait "
        "--out runs/pretrained-grower-cnn-suite.json"
    ): NotRun(PRETRAINED_GROWER_WHY),
    (
        "python benchmarks/ppo_greedy_check.py runs/ppo-suite-2/run-1 runs/ppo-suite-2/run-2 "
        "runs/ppo-suite-2/run-3"
    ): NotRun(
        "it needs the three training runs; test_mixed_training.py checks a run it trains, "
        "and the script's --smoke runs in test_benchmark_smoke.py"
    ),
    (
        "python benchmarks/ppo_greedy_check.py runs/ppo-suite-4/run-1 runs/ppo-suite-4/run-2 "
        "runs/ppo-suite-4/run-3"
    ): NotRun(
        "it needs the three training runs; test_mixed_training.py checks a run it trains, "
        "and the script's --smoke runs in test_benchmark_smoke.py"
    ),
    (
        "python benchmarks/ppo_training_episodes.py runs/ppo-suite-6/run-1 "
        "runs/ppo-suite-6/run-2 runs/ppo-suite-6/run-3 --block 8 --markdown"
    ): NotRun(
        "it needs the three training runs (docs/results/ppo-suite-6/run-N.tar.gz); the "
        "script's --smoke runs in test_benchmark_smoke.py"
    ),
    (
        "python benchmarks/ppo_training_episodes.py runs/ppo-suite-4/run-1 "
        "runs/ppo-suite-4/run-2 runs/ppo-suite-4/run-3 --block 8 --markdown"
    ): NotRun(
        "it needs the three training runs (docs/results/ppo-suite-4/run-N.tar.gz); the "
        "script's --smoke runs in test_benchmark_smoke.py"
    ),
    "esper compare examples/host-growth-digits.toml --jobs 2": NotRun(
        "it needs the six trained checkpoints; test_every_example_experiment_plans plans it"
    ),
    # docs/results/ppo-digits.md
    (
        "esper train --task digits --set tasks.digits.preset=impaired --seed 200 "
        "--out runs/ppo-digits-s200"
    ): Run(TINY + PPO),
    (
        "esper train --task digits --set tasks.digits.preset=impaired --seed 201 "
        "--out runs/ppo-digits-s201"
    ): NotRun("the seed-200 command with another training seed"),
    (
        "esper train --task digits --set tasks.digits.preset=impaired --seed 202 "
        "--out runs/ppo-digits-s202"
    ): NotRun("the seed-200 command with another training seed"),
    "esper compare examples/ppo-digits.toml --jobs 2": NotRun(
        "it needs the three trained checkpoints; test_every_example_experiment_plans plans it"
    ),
    # docs/results-digits.md
    "esper train --task digits --set tasks.digits.preset=impaired --out runs/ppo-digits": Run(
        TINY + PPO
    ),
    # docs/own-model.md: a controller for your own model (mymodel.py: MODULES)
    (
        "esper train --policy ppo --task dataset --envs 4 --updates 20 --out runs/my-ppo "
        "--set tasks.dataset.model=mymodel:build --set tasks.dataset.data=mymodel:splits "
        '--set \'tasks.dataset.slots=["layer1", "layer2"]\' --set env.max_epochs=12'
    ): Run(TINY + PPO),
    # plugins/esper-blueprints/README.md
    "esper blueprints": Run(()),
    # plugins/esper-ray/README.md
    "esper compare examples/compare-digits.toml --runner ray --jobs 4": DryRun(
        30, "a comparison of {runs} runs on Ray: a private instance starts a Ray cluster"
    ),
    # plugins/esper-rewards/README.md
    "esper run --reward shaped": Run(),
    "esper run --reward pbrs --set rewards.pbrs.rent_weight=0.02": Run(),
    "esper config show --reward loss": Run(()),
    # plugins/esper-slurm/README.md
    "esper compare examples/compare-digits.toml --runner slurm --jobs 32": DryRun(
        30, "a comparison of {runs} runs as SLURM jobs: needs a cluster"
    ),
    # plugins/esper-streams/README.md (the last, launched by torchrun)
    "esper train --executor distributed --envs 8": NotRun(
        "torchrun starts two worker interpreters (each imports torch) and needs its rendezvous "
        "environment; tests/plugins/esper_streams runs the distributed executor on gloo"
    ),
    # plugins/esper-tamiyo-heuristic/README.md
    "esper run": Run(),
    "esper run --policy wait --set tasks.digits.preset=impaired": Run(),
    "esper run --policy random --set policies.random.seed=3": Run(),
    (
        "esper run --set policies.heuristic.min_epoch=5 "
        "--set 'policies.heuristic.blueprint_order=[\"conv_light\"]'"
    ): Run(),
    (
        "esper run --policy static --set 'policies.static.seeds=[\"conv_heavy@r0c0\"]' "
        "--set tasks.digits.preset=impaired"
    ): Run(),
    # plugins/esper-tamiyo-ppo/README.md
    PPO_SLOTS: Run(TINY + PPO),
    "esper run --task digits --set tasks.digits.n_blocks=3 --policy ppo:runs/ppo-slots": Run(
        needs=PPO_SLOTS
    ),
    "esper run --task digits --set tasks.digits.n_blocks=2 --policy ppo:pretrained": Run(),
    # docs/results/ppo-pretrained.md: the chain that trained ppo:pretrained, its export and
    # its evaluation (init_from and the shipped file are tested in test_init_from.py and
    # test_pretrained.py)
    PRETRAINED_A: NotRun(PRETRAINED_WHY),
    PRETRAINED_B: NotRun(PRETRAINED_WHY),
    PRETRAINED_C: NotRun(PRETRAINED_WHY),
    (
        "python -m esper_tamiyo_ppo.pretrained runs/pretrained-c/checkpoint.pt "
        "plugins/esper-tamiyo-ppo/esper_tamiyo_ppo/pretrained/checkpoint.pt"
    ): NotRun("it would overwrite the shipped checkpoint; test_pretrained.py exports one"),
    "esper compare examples/ppo-pretrained-digits.toml --jobs 1": DryRun(50),
    "esper compare examples/ppo-pretrained-glyphs.toml --jobs 1": DryRun(70),
    (
        "python benchmarks/ppo_pretrained_grower.py --model mlp --seeds 3000-3009 "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-1.pt "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-2.pt "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-3.pt --policy heuristic "
        "--policy wait --out runs/pretrained-grower-mlp.json"
    ): NotRun(PRETRAINED_GROWER_WHY),
    (
        "python benchmarks/ppo_pretrained_grower.py --model cnn --seeds 3000-3009 "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-1.pt "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-2.pt "
        "--policy ppo:docs/results/checkpoints/ppo-pretrained-run-3.pt --policy heuristic "
        "--policy wait --out runs/pretrained-grower-cnn.json"
    ): NotRun(PRETRAINED_GROWER_WHY),
    "python benchmarks/grower_widen.py --model mlp --out runs/grower-widen-mlp.json": NotRun(
        GROWER_WIDEN_WHY
    ),
    "python benchmarks/grower_widen.py --model cnn --out runs/grower-widen-cnn.json": NotRun(
        GROWER_WIDEN_WHY
    ),
    "esper train --resume runs/ppo-digits": Run((), needs=PPO_DIGITS),
    "esper report runs/ppo-digits": Run((), needs=PPO_DIGITS),
    (
        "esper compare --task digits --set tasks.digits.preset=impaired "
        "--policy ppo:runs/ppo-digits/checkpoint.pt --policy heuristic --policy wait "
        "--set policies.ppo.deterministic=true --seeds 10 --seed 2000 --baseline wait"
    ): DryRun(30, needs=PPO_DIGITS),
    (
        "esper run --task digits --set tasks.digits.preset=impaired --policy ppo "
        "--set policies.ppo.allow_untrained=true --set policies.ppo.deterministic=false "
        "--envs 8 --episodes 5 --seed 500 --set env.max_batches=2 --set run.threads=1"
    ): Run((*TINY, "--envs", "2", "--episodes", "1")),
    # plugins/esper-tasks/README.md (mypkg: MODULES)
    "esper run --task digits": Run(),
    "esper run --task glyphs --set tasks.glyphs.preset=base": Run(TINY + GLYPHS),
    "esper run --task cifar10 --set tasks.cifar10.download=true": NotRun(
        "downloads CIFAR-10 (about 170 MB) from the internet"
    ),
    "esper run --task charlm --set tasks.charlm.preset=small": Run(TINY + CHARLM),
    (
        "esper run --task dataset --set tasks.dataset.data=mypkg.data:splits "
        "--set tasks.dataset.model=mypkg.models:resnet "
        '--set \'tasks.dataset.slots=["layer1", "layer2"]\''
    ): Run(),
    # plugins/esper-telemetry/README.md
    "esper run --telemetry tensorboard --telemetry wandb": Run(),
    "tensorboard --logdir runs/": NotRun(
        "TensorBoard's viewer, a web server that runs until stopped; what the tensorboard "
        "backend writes is tested in tests/plugins/esper_telemetry"
    ),
    "esper report 'runs/<run>' --out report --dpi 200 --curves 4 --lanes 2 --json": Run(
        (), placeholder=("runs/<run>", "runs/run")
    ),
    (
        "esper compare --task digits --set tasks.digits.preset=impaired "
        "--policy ppo:runs/ppo-digits/checkpoint.pt --policy heuristic --policy wait "
        "--set policies.ppo.deterministic=true --seeds 10 --seed 3000 --baseline wait"
    ): DryRun(
        30,
        needs="esper train --task digits --set tasks.digits.preset=impaired --out runs/ppo-digits",
    ),
}

DOCUMENTED = {c.text: c for c in documented_commands()}


def test_every_documented_command_has_an_entry() -> None:
    """A command added to the docs is run or listed here; an entry whose command left the
    docs goes with it."""
    assert sorted(set(DOCUMENTED) - set(COMMANDS)) == [], "documented, not in COMMANDS"
    assert sorted(set(COMMANDS) - set(DOCUMENTED)) == [], "in COMMANDS, no longer documented"


def test_no_command_hides_in_a_block_that_is_not_bash() -> None:
    """An untagged (or ```sh) block's commands would be neither run nor parsed: tag it
    ```bash, or ```text where it is not a command (a diagram, a message)."""
    assert untagged_commands() == []


def _requirements(name: str) -> set[str]:
    """What a requirements file installs in editable mode, its ``-r`` includes followed."""
    found: set[str] = set()
    for line in (REPO / name).read_text(encoding="utf-8").splitlines():
        words = line.split("#")[0].split()
        if words[:1] == ["-r"]:
            found |= _requirements(words[1])
        elif words[:1] == ["-e"]:
            found.add(words[1].split("[")[0])
    return found


def test_every_documented_install_installs_what_the_doc_says() -> None:
    """``pip install -r FILE`` names a requirements file; ``pip install -e DIR`` a package
    directory the test install (which this test runs in) includes, and a plugin's README
    installs that plugin."""
    installs = pip_installs()
    assert installs
    tested = _requirements("requirements-test.txt")
    for documented in installs:
        flag, target = documented.argv[2], documented.argv[3].split("[")[0]
        assert flag in ("-r", "-e"), documented.text
        if flag == "-r":
            assert (REPO / target).is_file(), documented.text
            continue
        assert (REPO / target / "pyproject.toml").is_file(), documented.text
        assert target in tested, f"{documented.text}: not in requirements-test.txt"
        if documented.where != "README.md":
            assert documented.where == f"{target}/README.md", documented.text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the commands run: ``examples/`` is the repository's, ``runs/`` is new."""
    root = tmp_path_factory.mktemp("docs-commands")
    (root / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    for name, source in MODULES.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_text(source, encoding="utf-8")
    return root


@pytest.fixture
def in_workdir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(workdir)
    yield workdir


def esper(argv: list[str]) -> click.testing.Result:
    group, pm = build_cli(plugin_manager())
    return CliRunner().invoke(group, argv, obj={"pm": pm}, catch_exceptions=True)


def _leaf(argv: tuple[str, ...]) -> tuple[click.Command, list[str]]:
    """The (sub)command an ``esper ARGS`` line invokes and the arguments it parses."""
    command: click.Command = build_cli(plugin_manager())[0]
    args = list(argv[1:])
    while isinstance(command, click.Group) and args and args[0] in command.commands:
        command = command.commands[args.pop(0)]
    return command, args


def _run(text: str, workdir: Path, done: set[str]) -> click.testing.Result:
    """Run a documented esper command (its ``needs`` first, once per working directory)."""
    way = COMMANDS[text]
    assert isinstance(way, Run | DryRun)
    if way.needs is not None and way.needs not in done:
        _run(way.needs, workdir, done)
    argv = list(DOCUMENTED[text].argv[1:])
    if isinstance(way, Run):
        if way.placeholder is not None:
            shown, real = way.placeholder
            if not (workdir / real / "summary.json").exists():
                made = esper(SETUP_RUN.split()[1:])
                assert made.exit_code == 0, made.output
            argv = [real if a == shown else a for a in argv]
        argv += list(way.tiny)
    else:
        argv.append("--dry-run")
    result = esper(argv)
    assert result.exit_code == 0, f"{text}\n{result.output}\n{result.exception!r}"
    done.add(text)
    return result


_DONE: dict[Path, set[str]] = {}


def _by_way(*kinds: type) -> list[str]:
    return [t for t, w in COMMANDS.items() if isinstance(w, kinds) and t in DOCUMENTED]


def _runs() -> list[object]:
    return [
        pytest.param(t, marks=pytest.mark.xfail(strict=True, reason=w.broken))
        if isinstance(w := COMMANDS[t], Run) and w.broken
        else t
        for t in _by_way(Run, DryRun)
    ]


@pytest.mark.parametrize("text", _runs())
def test_the_documented_command_runs(text: str, in_workdir: Path) -> None:
    done = _DONE.setdefault(in_workdir, set())
    result = _run(text, in_workdir, done)
    way = COMMANDS[text]
    if isinstance(way, DryRun):  # the reason it gives for not running holds
        why = way.why.format(runs=way.runs)
        assert f"experiment OK: {way.runs} runs in " in result.output, (why, result.output)


def _script_flags(path: Path) -> set[str]:
    """The ``--flags`` a script's argparse parser declares."""
    flags = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    return {f for f in flags if isinstance(f, str) and f.startswith("-")}


@pytest.mark.parametrize("text", _by_way(NotRun, RunElsewhere))
def test_a_command_not_run_here_still_parses(text: str) -> None:
    """Its flags exist (the click command, or the script's argparse parser), the files it
    names exist, and a test said to run it does."""
    documented = DOCUMENTED[text]
    way = COMMANDS[text]
    assert way.why if isinstance(way, NotRun) else way.test  # type: ignore[union-attr]
    for path in existing_paths(documented.argv):
        assert (REPO / path).is_file(), f"{text}: {path} does not exist"
    if documented.is_esper:
        command, args = _leaf(documented.argv)
        command.make_context("esper", args)  # an unknown flag or a bad value raises
    elif any(a.endswith(".py") for a in documented.argv):
        (script,) = [a for a in documented.argv if a.endswith(".py")]
        flags = [a for a in documented.argv if a.startswith("--")]
        assert set(flags) <= _script_flags(REPO / script), f"{text}: {script} lacks a flag"
    if isinstance(way, RunElsewhere):
        file, name = way.test.split("::")
        source = (REPO / file).read_text(encoding="utf-8")
        assert f"def {name}(" in source
        body = source[source.index(f"def {name}(") :].split("\ndef ")[0]
        (script,) = [a for a in documented.argv if a.endswith(".py")]
        assert Path(script).name in body, f"{way.test} does not run {script}"


def _fake_results(path: Path) -> None:
    """A results.json of the real format (the one converter) with a few cells of two
    policies: what the doc's script reads."""
    from esper_core.compare.cell_result import CellResult
    from esper_core.compare.results import RESULTS_SCHEMA_VERSION, ComparisonResults
    from esper_core.converter import unstructure

    cells = [
        CellResult("glyphs", policy, seed, acc, 0.0, 0, 0, 1.0, "", params_forward=1702.0)
        for seed in range(4)
        for policy, acc in (("ppo", 80.0 + seed), ("heuristic", 79.0 + 2 * seed))
    ]
    results = ComparisonResults(
        RESULTS_SCHEMA_VERSION, ["glyphs"], ["ppo", "heuristic"], [0, 1, 2, 3], None, 0.95,
        200, 0, [], cells, [],
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(unstructure(results)), encoding="utf-8")


@pytest.mark.parametrize("text", _by_way(Script))
def test_a_documented_script_runs(
    text: str, in_workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    way = COMMANDS[text]
    assert isinstance(way, Script)
    doc = (REPO / DOCUMENTED[text].where).read_text(encoding="utf-8")
    source = doc[doc.index("```python\n" + way.marker) :].split("\n", 1)[1].split("```")[0]
    (in_workdir / way.name).write_text(source, encoding="utf-8")
    _fake_results(in_workdir / way.input_)
    monkeypatch.setattr(sys, "argv", list(DOCUMENTED[text].argv[1:]))
    runpy.run_path(way.name, run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    # One line per metric: estimate, interval, wins / ties / losses of ppo over heuristic.
    assert [x.split()[0] for x in lines] == ["final_test_acc", "params_forward", "train_flops"]
    assert lines[0].split()[-3:] == ["1", "1", "2"]
