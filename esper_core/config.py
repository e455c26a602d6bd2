"""Run configuration: attrs sections, loading (TOML/JSON), ``--set`` overrides, dumping.

Every default of DOMAIN.md is a named field here. Component tables (``[rewards.pbrs]``)
are kept raw and validated by the component's options class when the run is resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from attrs import define

from esper_core.config_io import apply_overrides, merge, read_file
from esper_core.config_lifecycle import LifecycleSection
from esper_core.config_limits import (
    MAX_BATCH,
    MAX_ENVS,
    MAX_EPOCHS,
    MAX_FACTOR,
    MAX_HISTORY,
    MAX_LR,
    MAX_POINTS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    check_device,
)
from esper_core.config_train import TrainSection
from esper_core.converter import (
    drop_none,
    each,
    in_range,
    non_empty,
    one_of,
    options_field,
    os_path,
    path_component,
    structure,
    unstructure,
)
from esper_core.errors import ConfigError

OPTIMIZERS = ("sgd", "adamw")
SCHEDULES = ("constant", "cosine")


# Keys of the per-group SGD settings that one recipe replaced: a config that still sets
# them is told what to write instead.
RENAMED_TRAINING_KEYS = {
    "host_lr": "lr",
    "seed_lr": "lr",
    "host_momentum": "momentum",
    "seed_momentum": "momentum",
    "host_weight_decay": "weight_decay",
    "seed_weight_decay": "weight_decay",
}

COMPONENT_KINDS = ("tasks", "rewards", "policies", "telemetry", "executors")
CONFIG_SCHEMA_VERSION = 1


@define
class RunSection:
    """What to run and where."""

    name: str | None = options_field(
        None,
        path_component,
        "Run directory name inside out_dir, a single file name "
        "(default: derived from task and policy).",
    )
    seed: int = options_field(
        0,
        in_range(0, MAX_SEED, integer=True),
        (
            "Base seed (< 2**32); env i of episode round k uses seed + k x n_envs + i, so "
            "runs meant to be independent need seeds at least n_envs x episodes apart."
        ),
    )
    episodes: int = options_field(
        1, in_range(1, MAX_EPOCHS, integer=True), "Episodes per env for `esper run`."
    )
    n_envs: int = options_field(1, in_range(1, MAX_ENVS, integer=True), "Parallel environments.")
    device: str = options_field("cpu", check_device, "Device of every env (one-device executors).")
    devices: list[str] = options_field([], each(check_device), "Devices of envs, round-robin.")
    out_dir: str = options_field("runs", os_path, "Parent directory of run directories.")
    task: str = options_field("digits", doc="Task component (tasks.*).")
    policy: str = options_field(
        "heuristic", doc="Policy component (policies.*), e.g. ppo:path/ckpt.pt."
    )
    reward: str = options_field("pbrs", doc="Reward family (rewards.*).")
    executor: str = options_field("serial", doc="Executor (executors.*).")
    telemetry: list[str] = options_field(["console", "jsonl", "csv"], doc="Telemetry backends.")
    gamma: float = options_field(
        0.995,
        in_range(0, 1, lo_open=True),
        "Discount of the run: PPO and reward shaping both use it.",
    )
    checkpoint_every: int = options_field(
        5,
        in_range(0, MAX_EPOCHS, integer=True),
        "Write a checkpoint every N epochs (0: only at episode ends).",
    )
    quiet: bool = options_field(False, doc="Suppress the live console display.")
    # One thread by default: on small CPU hosts torch's default (a thread per core) made the
    # main command 2.6x slower per epoch (benchmarks/thread_default.py), and a fixed count
    # gives the same numbers on every machine (the thread count changes float sums' order).
    threads: int = options_field(
        1,
        in_range(0, MAX_THREADS, integer=True),
        "torch intra-op threads for this process, at most 4 per usable CPU and 1024 "
        "(0: torch's default, one per core). The count changes results in the last digits.",
    )
    # Generous on purpose: the slowest real epoch (CIFAR-10 on a small CPU) takes minutes;
    # an hour means only code that never returns is stopped.
    epoch_timeout: float = options_field(
        3600.0,
        in_range(0, MAX_SECONDS),
        "Seconds one epoch (or an episode's start, a policy update, an evaluation) may take "
        "before the run is stopped as hung, naming the phase and the plugin that was running; "
        "the last checkpoint stays resumable (0: no limit). It does not change results, so a "
        "resumed run may raise it in its config.toml.",
    )


@define
class EnvSection:
    """The environment: one RL step is one host epoch."""

    max_epochs: int | None = options_field(
        None, in_range(1, MAX_EPOCHS, integer=True), "Epochs per episode (task default)."
    )
    batch_size: int | None = options_field(
        None, in_range(1, MAX_BATCH, integer=True), "Training batch size (task default)."
    )
    eval_batch_size: int | None = options_field(
        None, in_range(1, MAX_BATCH, integer=True), "Validation/test batch size."
    )
    max_batches: int | None = options_field(
        None, in_range(1, 10**9, integer=True), "Cap on training batches per epoch."
    )
    slots: list[str] | None = options_field(
        None, non_empty, "Enabled slot ids (default: all the host has)."
    )
    blueprints: list[str] | None = options_field(
        None,
        non_empty,
        "Blueprints the controller may germinate, by key (cnn/conv_light) or name (conv_light); "
        "at least one (with none nothing could ever grow); "
        "default: every installed one of the task's topology. A run stores the list it resolved, "
        "so installing a blueprint package changes neither its action space nor its checkpoints.",
    )
    max_seeds: int = options_field(
        3, in_range(0, 1000, integer=True), "Cap on seeds in the model (live + fossilized)."
    )
    min_prune_age: int = options_field(
        1, in_range(0, MAX_EPOCHS, integer=True), "Epochs a seed must live before PRUNE."
    )
    protect_healthy_seeds: bool = options_field(
        True,
        doc="PRUNE a healthy seed only once its stage's trial is done (min_training_epochs "
        "in TRAINING, the alpha ramp in BLENDING; never in GERMINATED); a seed in trouble "
        "(low gradient health, exploding gradient) can always be pruned.",
    )
    gated_advance: bool = options_field(
        True,
        doc="ADVANCE and FOSSILIZE are legal only when the gate they lead through passes "
        "(off: also when it fails, and the env refuses the action).",
    )
    history_length: int = options_field(
        5, in_range(1, MAX_HISTORY, integer=True), "Loss/accuracy history in observations."
    )
    plateau_delta: float = options_field(
        0.5,
        in_range(0, MAX_POINTS),
        "Accuracy gain (points) below which an epoch counts as plateau.",
    )
    eval_test_every: int = options_field(
        1,
        in_range(0, MAX_EPOCHS, integer=True),
        "Measure test accuracy every N epochs (0: at episode end only).",
    )
    num_workers: int = options_field(
        0,
        in_range(0, 256, integer=True),
        "DataLoader workers for datasets that do not fit in memory.",
    )
    expansion_batches: int = options_field(
        2,
        in_range(0, 10**6, integer=True),
        "Validation batches of the end-of-epoch gradient probe: each slot's expansion score "
        "(what a new module there would buy at first order, over what the host's own next "
        "step buys; Observation.expansion), read by policies.heuristic's trigger = "
        "expansion (0: no probe; that trigger then waits and says why).",
    )
    fossil_contribution_points: float = options_field(
        1.0,
        in_range(-MAX_POINTS, MAX_POINTS),
        "A fossil whose last contribution is at least this many points counts as contributing.",
    )


@define
class TrainingSection:
    """Optimizers, clipping, precision and compilation of the host training."""

    # The recipe: each field left unset takes the task's default (Task.default_recipe,
    # or its model family's), and the run records the values it resolved.
    optimizer: str | None = options_field(
        None, one_of(*OPTIMIZERS), "Optimizer of host and seeds: sgd or adamw (task default)."
    )
    lr: float | None = options_field(
        None, in_range(0, MAX_LR, lo_open=True), "Peak learning rate of host and seeds."
    )
    momentum: float | None = options_field(
        None, in_range(0, 1, hi_open=True), "SGD momentum (sgd only)."
    )
    nesterov: bool | None = options_field(None, doc="Nesterov momentum (sgd only).")
    betas: list[float] | None = options_field(
        None,
        each(in_range(0, 1, hi_open=True), length=2),
        "AdamW's two betas, e.g. [0.9, 0.95] (adamw only).",
    )
    weight_decay: float | None = options_field(
        None, in_range(0, 1), "Weight decay of matrices and conv kernels."
    )
    decay_embeddings: bool | None = options_field(
        None, doc="Decay embedding tables too (a tied head's weight is one)."
    )
    decay_norms_and_biases: bool | None = options_field(
        None, doc="Decay norm scales and biases too."
    )
    schedule: str | None = options_field(
        None,
        one_of(*SCHEDULES),
        "Learning-rate schedule after warm-up: constant, or cosine to min_lr at the run's "
        "last step.",
    )
    warmup: float | None = options_field(
        None, in_range(0, 1), "Linear warm-up, as a fraction of the run's optimizer steps."
    )
    min_lr: float | None = options_field(
        None, in_range(0, 1), "The cosine's final rate, as a fraction of lr."
    )
    seed_warmup: float | None = options_field(
        None,
        in_range(0, 1),
        "A seed born mid-run joins the schedule at its current rate, ramped up linearly over "
        "this fraction of the run's steps (0: at once).",
    )
    grad_clip: float = options_field(
        1.0,
        in_range(0, 1e9, lo_open=True),
        "Max gradient norm, over host and seeds together (see clip_per_group).",
    )
    clip_per_group: bool = options_field(
        False,
        doc="Clip the host and each seed to grad_clip separately (the original system's "
        "rule, which gives every seed a budget of its own) instead of one global norm.",
    )
    vanishing_grad: float = options_field(
        1e-7, in_range(0, 1), "A seed grad norm below this counts as vanishing."
    )
    exploding_grad: float = options_field(
        100.0, in_range(0, 1e9, lo_open=True), "A seed grad norm above this counts as exploding."
    )
    amp: str = options_field(
        "off", one_of("off", "bf16", "fp16"), "Mixed precision (CUDA only for fp16)."
    )
    compile: str = options_field(
        "off",
        one_of("off", "default", "reduce-overhead", "max-autotune"),
        "torch.compile mode for the model.",
    )


@define
class GovernorSection:
    """Safety rollback (DOMAIN §8)."""

    enabled: bool = options_field(
        True, doc="Roll back to the last snapshot when the loss diverges."
    )
    snapshot_every: int = options_field(
        5, in_range(1, MAX_EPOCHS, integer=True), "Epochs between snapshots."
    )
    k_chance: float = options_field(
        1.5, in_range(0, MAX_FACTOR, lo_open=True), "Panic floor = k_chance x chance-level loss."
    )
    sigma: float = options_field(
        6.0, in_range(0, MAX_FACTOR, lo_open=True), "Panic floor = mean + sigma x std of history."
    )
    mean_multiplier: float = options_field(
        3.0, in_range(0, MAX_FACTOR, lo_open=True), "Panic floor = multiplier x mean."
    )
    consecutive: int = options_field(
        3, in_range(1, MAX_EPOCHS, integer=True), "Epochs above every floor before panic."
    )
    min_history: int = options_field(
        3, in_range(1, MAX_HISTORY, integer=True), "Losses needed before statistical checks."
    )
    history: int = options_field(
        20, in_range(2, MAX_HISTORY, integer=True), "Validation losses remembered."
    )
    penalty: float = options_field(
        -10.0, in_range(-1000, 0), "Reward given to the controller at a rollback (<= 0)."
    )
    chance_band: float = options_field(
        1.5,
        in_range(0, MAX_FACTOR),
        "Accuracy at most chance x this counts as chance level (0: no accuracy trigger).",
    )


@define
class RunConfig:
    """The fully resolved configuration of a run."""

    run: RunSection = attrs.field(factory=RunSection)
    env: EnvSection = attrs.field(factory=EnvSection)
    training: TrainingSection = attrs.field(factory=TrainingSection)
    lifecycle: LifecycleSection = attrs.field(factory=LifecycleSection)
    governor: GovernorSection = attrs.field(factory=GovernorSection)
    train: TrainSection = attrs.field(factory=TrainSection)
    # Component tables stay raw: each component's options class checks its values,
    # finiteness included, when the run is resolved.
    tasks: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    rewards: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    policies: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    telemetry: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    executors: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def component_options(self, kind: str, name: str) -> dict[str, Any]:
        table: dict[str, dict[str, Any]] = getattr(self, kind)
        return dict(table.get(name, {}))


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> RunConfig:
    """Config file (optional) <- ``extra`` (from CLI flags) <- ``--set`` overrides."""
    data: dict[str, Any] = read_file(path) if path is not None else {}
    if extra:
        data = merge(data, extra)
    if overrides:
        data = apply_overrides(data, overrides)
    return config_from_dict(data)


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """A config as a file or :func:`config_to_dict` holds it: its schema version dropped, a
    renamed key refused, a setting added since it was written at its default."""
    data = {k: v for k, v in data.items() if k != "schema_version"}
    renamed = [
        f"training.{old}: replaced by training.{new} (one recipe trains host and seeds; "
        "see docs/recipes.md)"
        for old, new in RENAMED_TRAINING_KEYS.items()
        if isinstance(data.get("training"), dict) and old in data["training"]
    ]
    if renamed:
        raise ConfigError(renamed)
    return structure(data, RunConfig)


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    data: dict[str, Any] = drop_none(unstructure(config))
    return {"schema_version": CONFIG_SCHEMA_VERSION, **data}


def dump_toml(config: RunConfig) -> str:
    import tomli_w

    return tomli_w.dumps(config_to_dict(config))
