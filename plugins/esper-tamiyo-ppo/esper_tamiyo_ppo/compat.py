"""Reading a trained policy back: where its checkpoint is, and whether it fits this run.

A ``flat`` PPO policy only makes sense for the task and the action vocabulary it was
trained on: the same task, the same slot ids, the same blueprints in the same order, the
same styles, tempos and alpha targets, and the same feature layout. Any difference is a
:class:`~esper_core.errors.CheckpointError` that says exactly what differs. (Two tasks
can share a vocabulary, e.g. two image tasks on the same host, so the task is checked
by name: their observations mean different things.)

A ``slots`` policy has no weight sized by the slots or the blueprints, and its features
are relative (losses over the chance loss, parameters over the host's): it is accepted
on any task and host whose lifecycle vocabularies (styles, tempos, alpha targets,
which size its heads) and history length are the training run's, provided this plugin
reads its slot-feature schema (:func:`esper_tamiyo_ppo.slot_layout.schema`): schema 2
on any host, a mixed run's padded space included; schema 1 (checkpoints trained before
schema 2) on one host's own space per run. Whether it acts WELL on a host or task it
never saw is a question of measurement, not of this check.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from esper_core.env.observation import feature_dim as observation_dim
from esper_core.errors import CheckpointError, ConfigError
from esper_core.lifecycle.actions import ActionSpace
from esper_tamiyo_ppo.options import GROWTH_FIELDS, MODEL_FIELD_DEFAULTS
from esper_tamiyo_ppo.slot_layout import KNOWN_VERSIONS, schema

CHECKPOINT_NAME = "checkpoint.pt"
# ``ppo:pretrained`` names the slots checkpoint shipped inside this package (PRETRAINED.md
# says how it was trained); a directory of that name is reached as ``ppo:./pretrained``.
PRETRAINED = "pretrained"
PRETRAINED_DIR = "pretrained"
STATE_KIND = "esper_tamiyo_ppo"
STATE_VERSION = 1

_VOCABULARY = (
    ("slot_ids", "slot ids"),
    ("blueprints", "blueprint vocabulary"),
    ("styles", "germination styles"),
    ("tempos", "tempos"),
    ("alpha_targets", "alpha targets"),
)
# What sizes the slots network's heads: the lifecycle's settings, not the host's.
_LIFECYCLE_VOCABULARY = ("styles", "tempos", "alpha_targets")


# Tasks whose policies a run of another task accepts (the vocabulary must still match):
# a Grower's loop (task "loop") grows the user's own model, which `esper train --task
# dataset` trains a controller on through the CLI, with the same slot ids.
ACCEPTS: dict[str, tuple[str, ...]] = {"loop": ("dataset",)}


def _train_for(task: str, space: ActionSpace) -> str:
    """The command that trains a policy this run accepts."""
    if task != "loop":
        return f"train a policy for {task!r} (esper train --policy ppo --task {task})"
    # Slot ids are the submodule names with "/" for "." (module_host.slot_id_of).
    names = ", ".join(f'"{slot.replace("/", ".")}"' for slot in space.slot_ids)
    return (
        "train one on your model, data and slots with esper train --policy ppo --task dataset "
        "--set tasks.dataset.model=MODULE:MODEL_FACTORY --set tasks.dataset.data=MODULE:SPLITS "
        f"--set 'tasks.dataset.slots=[{names}]' (docs/own-model.md, A controller for your model)"
    )


def space_to_dict(space: ActionSpace) -> dict[str, list[Any]]:
    return {key: list(getattr(space, key)) for key, _ in _VOCABULARY}


def _fmt(values: Sequence[Any]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def vocabulary_problems(
    saved: dict[str, list[Any]], space: ActionSpace, keys: Sequence[str] | None = None
) -> list[str]:
    """One line per vocabulary (of ``keys``; all when None) that differs between a
    checkpoint and this run's task."""
    problems = []
    for key, label in _VOCABULARY:
        if keys is not None and key not in keys:
            continue
        theirs, ours = list(saved.get(key, [])), list(getattr(space, key))
        if theirs == ours:
            continue
        only_saved = [v for v in theirs if v not in ours]
        only_task = [v for v in ours if v not in theirs]
        detail = []
        if only_saved:
            detail.append(f"only in the checkpoint: {_fmt(only_saved)}")
        if only_task:
            detail.append(f"only in this task: {_fmt(only_task)}")
        if not detail:
            detail.append("same entries in a different order")
        problems.append(
            f"{label}: checkpoint has {_fmt(theirs)}, this task has {_fmt(ours)} ({'; '.join(detail)})"
        )
    return problems


def check_kind(state: Any, source: str) -> None:
    """Raise :class:`CheckpointError` unless ``state`` is a PPO state this plugin reads."""
    if not isinstance(state, dict) or state.get("kind") != STATE_KIND:
        kind = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{source} does not hold a PPO policy (found {kind!r}); pass the checkpoint.pt of an "
            "`esper train --policy ppo` run"
        )
    if state.get("version") != STATE_VERSION:
        raise CheckpointError(
            f"{source} holds PPO state version {state.get('version')!r}; this plugin reads version {STATE_VERSION}"
        )


def check_compatible(
    state: dict[str, Any],
    space: ActionSpace,
    feature_dim: int,
    source: str,
    task: str,
    history_length: int | None = None,
) -> None:
    """Raise :class:`CheckpointError` unless ``state`` (a PPO state dict) fits this run
    (``history_length``: this run's, which a ``slots`` checkpoint is checked against)."""
    check_kind(state, source)
    if state.get("options", {}).get("network", "flat") == "slots":
        if history_length is None:
            raise ValueError("checking a slots checkpoint needs this run's history_length")
        slot_problems = _slot_problems(state, space, history_length)
        if slot_problems:
            raise CheckpointError(f"{source} does not match this run: " + "; ".join(slot_problems))
        return
    trained_on = state.get("task")  # absent in checkpoints written before it was recorded
    if trained_on is not None and trained_on != task and trained_on not in ACCEPTS.get(task, ()):
        raise CheckpointError(
            f"{source} holds a PPO policy trained on task {trained_on!r}, this run's task is "
            f"{task!r}; {_train_for(task, space)}"
        )
    problems = vocabulary_problems(state["space"], space)
    trained_history = int(state["history_length"])
    if int(state["feature_dim"]) != feature_dim:
        # The feature vector's length follows from the slot and blueprint counts and the
        # history length. With the training history length this run's vocabulary gives
        # this run's length exactly when the history length is unchanged; then the
        # vocabulary lines above already say why, and blaming the history would mislead.
        if observation_dim(space, trained_history) != feature_dim:
            problems.append(
                f"env.history_length: checkpoint was trained with {trained_history}, this run "
                f"differs ({state['feature_dim']} features vs {feature_dim}); "
                f"add --set env.history_length={trained_history}"
            )
        elif not problems:
            problems.append(
                f"feature vector: checkpoint has {state['feature_dim']} features, this run has "
                f"{feature_dim} with the same vocabulary and history length (the observation "
                "layout changed since training); train the policy again"
            )
    if problems:
        message = f"{source} does not match this run: " + "; ".join(problems)
        saved = list(state["space"].get("blueprints", []))
        if saved != list(space.blueprints) and saved:
            missing = [key for key in saved if key not in space.blueprints]
            if missing:
                # Pinning cannot bring back a blueprint whose package is gone.
                message += (
                    f"; the checkpoint's blueprints {_fmt(missing)} are not installed: install "
                    "the package that provides them (esper blueprints lists what is)"
                )
            else:
                # The way out when blueprint packages were installed since training.
                pinned = ",".join(f'"{key}"' for key in saved)
                message += (
                    f"; to use the checkpoint's blueprints, add --set 'env.blueprints=[{pinned}]'"
                )
        raise CheckpointError(message)


def schema_version(state: dict[str, Any]) -> int:
    """The slot-feature schema version a PPO state records (0 when it records none)."""
    saved = state.get("feature_schema")
    version = saved.get("version") if isinstance(saved, dict) else None
    return version if isinstance(version, int) else 0


def _slot_problems(state: dict[str, Any], space: ActionSpace, history_length: int) -> list[str]:
    """What keeps a ``slots`` checkpoint from this run: its feature schema or the
    lifecycle's vocabularies (never the slots, the blueprints or the task)."""
    problems = vocabulary_problems(state["space"], space, _LIFECYCLE_VOCABULARY)
    saved, version = state.get("feature_schema"), schema_version(state)
    known = version in KNOWN_VERSIONS
    ours = schema(history_length, version) if known else schema(history_length)
    if saved == ours:
        return problems
    trained = saved.get("history_length") if isinstance(saved, dict) else None
    if known and isinstance(trained, int) and schema(trained, version) == saved:
        problems.append(
            f"env.history_length: checkpoint was trained with {trained}, this run has "
            f"{history_length}; add --set env.history_length={trained}"
        )
    else:
        problems.append(
            f"observation features: checkpoint was trained on slot-feature schema {saved}, "
            f"this plugin reads schema versions {', '.join(map(str, KNOWN_VERSIONS))} "
            f"(latest {schema(history_length)}); train the policy again with this version "
            "of esper-tamiyo-ppo"
        )
    return problems


def pretrained_path() -> Path:
    """The shipped checkpoint, found through the package (editable or installed alike)."""
    # A wheel installs package data as plain files, so the resource is a real path.
    return Path(str(resources.files("esper_tamiyo_ppo") / PRETRAINED_DIR / CHECKPOINT_NAME))


def resolve_checkpoint_path(argument: str) -> Path:
    """``ppo:PATH`` may name a checkpoint file or the run directory that holds one;
    ``ppo:pretrained`` names the checkpoint this package ships."""
    if argument.strip() == PRETRAINED:
        path = pretrained_path()
        if not path.is_file():
            raise CheckpointError(
                f"the pretrained PPO checkpoint {path} is missing from this installation of "
                "esper-tamiyo-ppo; reinstall it (pip install --force-reinstall esper-tamiyo-ppo)"
            )
        return path
    path = Path(argument).expanduser()
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise CheckpointError(
            f"PPO checkpoint {path} not found; train a policy with `esper train --policy ppo --out DIR` "
            f"and evaluate it with `--policy ppo:DIR/{CHECKPOINT_NAME}`"
        )
    return path


def load_policy_state(argument: str) -> tuple[dict[str, Any], str]:
    """The ``policy`` entry of a runner checkpoint, and a description of where it came from."""
    from esper_core.run.checkpoint import load_checkpoint

    path = resolve_checkpoint_path(argument)
    data = load_checkpoint(path)
    if "policy" not in data:
        raise CheckpointError(
            f"checkpoint {path} holds no policy state; is it an Esper run checkpoint?"
        )
    return data["policy"], f"checkpoint {path}"


def check_growth_request(options: Any, state: dict[str, Any], source: str) -> None:
    """Refuse host-growth options set against a checkpoint trained with others: the
    checkpoint's own replace them (its network holds a growth head only if it was trained
    with one, and asks for the growth it was trained to ask for), so the run would record
    ``host_growth=widen`` and never grow."""
    saved = state.get("options", {})
    for name in GROWTH_FIELDS:
        asked, default = getattr(options, name), MODEL_FIELD_DEFAULTS[name]
        had = saved.get(name, default) if isinstance(saved, dict) else default
        if asked != default and asked != had:
            head = " (its network has no host-growth head)" if had == "off" else ""
            raise ConfigError(
                [
                    f"policies.ppo.{name}={asked!r}: {source} was trained with {name}={had!r}"
                    f"{head} and asks only for the growth it was trained for; drop the "
                    f"option, or train a policy with it (esper train --set "
                    f"policies.ppo.{name}=...)"
                ]
            )
