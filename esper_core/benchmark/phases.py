"""The cells of the benchmark's three phases, planned with ``esper compare``'s machinery.

Each pair is a one-task :class:`~esper_core.compare.experiment.Experiment` whose task is
the pair's (so a cell's config is built as a comparison's: :func:`plan.resolve_configs`):

1. **tuning**: ``wait`` at each rate of the pair's grid on the tuning seeds (the
   comparison's own tuning cells, ``OUT/tuning/cells/PAIR/wait/point-K/seed-S``, chosen
   by its rule, :mod:`esper_core.compare.tuning_results`);
2. **menu**: every other entry of the pair's oracle menu on the tuning seeds at wait's
   chosen rate (``OUT/menu/cells/PAIR/ENTRY/seed-S``); wait's own runs there are the
   tuning cells of the chosen rate;
3. **evaluation**: ``wait``, the oracle's entry (arm ``oracle``, when it is not wait) and
   every policy under test on the evaluation seeds at the same rate
   (``OUT/cells/PAIR/ARM/seed-S``).

The rate is the one thing tuned, on ``wait`` for each pair, and every arm of the pair
uses it, as the field does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs

from esper_core.benchmark.menu import WAIT, MenuEntry
from esper_core.benchmark.suite import Pair, Suite
from esper_core.compare.experiment import Arm, Cell, Experiment
from esper_core.compare.plan import resolve_configs, with_seed
from esper_core.compare.tuning import TuningCell, tuning_cells
from esper_core.compare.tuning_grid import Tuning
from esper_core.plugins import PluginManager

LR = "training.lr"
MENU_DIR = "menu"
ORACLE = "oracle"
WAIT_ARM = Arm(WAIT, WAIT, WAIT)


def pair_experiment(
    suite: Suite,
    pair: Pair,
    policies: Sequence[Arm] = (WAIT_ARM,),
    seeds: Sequence[int] | None = None,
    tuned: bool = False,
) -> Experiment:
    """The pair as a one-task experiment (``tuned``: with wait's rate search)."""
    return Experiment(
        policies=tuple(policies),
        tasks=(pair.task,),
        seeds=tuple(seeds or suite.seeds),
        base=suite.pair_base(pair),
        tuning=Tuning(suite.tuning_seeds, "auto", {LR: list(pair.grid)}) if tuned else None,
        confidence=suite.confidence,
        resamples=suite.resamples,
        bootstrap_seed=suite.bootstrap_seed,
        stall=suite.stall,
    )


def tuning_phase(suite: Suite, pair: Pair, pm: PluginManager, threads: int) -> list[TuningCell]:
    return tuning_cells(pair_experiment(suite, pair, tuned=True), pm, threads)


def _cells(
    experiment: Experiment,
    pm: PluginManager,
    threads: int,
    lr: float,
    seeds: Sequence[int],
) -> list[Cell]:
    """Every policy of ``experiment`` at rate ``lr`` on ``seeds``, seed-major."""
    task = experiment.tasks[0]
    configs = resolve_configs(
        experiment,
        pm,
        threads,
        [(task, p, {LR: lr}, f"{p.label} on {task.label}") for p in experiment.policies],
    )
    return [
        Cell(task.label, p.label, seed, with_seed(config, seed))
        for seed in seeds
        for p, config in zip(experiment.policies, configs)
    ]


def menu_phase(
    suite: Suite,
    pair: Pair,
    menu: Sequence[MenuEntry],
    lr: float,
    pm: PluginManager,
    threads: int,
) -> list[Cell]:
    """Every entry but wait (its runs are the tuning cells at ``lr``) on the tuning seeds."""
    arms = [e.arm() for e in menu if e.policy != WAIT]
    if not arms:
        return []
    experiment = pair_experiment(suite, pair, arms, suite.tuning_seeds)
    return _cells(experiment, pm, threads, lr, suite.tuning_seeds)


def evaluation_arms(suite: Suite, oracle: MenuEntry | None, split: str) -> list[Arm]:
    """wait, the oracle's entry (unless it is wait), the policies under test, then on the
    training pairs the candidates for a default. The oracle runs exactly as its entry ran
    on the tuning seeds: its options and its partial config (a seed entry's
    ``env.blueprints`` when its blueprint is opt-in)."""
    arms = [WAIT_ARM]
    if oracle is not None and oracle.policy != WAIT:
        arms.append(attrs.evolve(oracle.arm(), label=ORACLE))
    candidates = suite.candidates if split == "training" else ()
    return arms + [p for p in (*suite.policies, *candidates) if p.label != WAIT]


def evaluation_phase(
    suite: Suite,
    pair: Pair,
    oracle: MenuEntry | None,
    lr: float,
    pm: PluginManager,
    threads: int,
) -> list[Cell]:
    experiment = pair_experiment(suite, pair, evaluation_arms(suite, oracle, pair.split))
    return _cells(experiment, pm, threads, lr, suite.seeds)


def menu_root(out: Path) -> Path:
    return out / MENU_DIR
