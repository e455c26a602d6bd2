"""The path of a grown run, read from a run directory written here by hand: a seed that
blends from its germination at epoch 3 and is fossilized at 8, one pruned from the forward
pass, one pruned while still incubating (which makes no point)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from esper_core.compare.growth_paths import (
    EVENTS_FILE,
    FinalPoint,
    PathPoint,
    growth_path,
    read_epochs,
    read_growth_path,
)
from esper_core.converter import unstructure
from esper_core.run.telemetry import (
    EpisodeFinished,
    EpochCompleted,
    Event,
    GateEvaluated,
    HostGrowthFossilized,
    HostGrowthStarted,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
    SlotSummary,
    StageChanged,
    dumps,
)

HOST = 1000
A, B, C = 200, 500, 50  # seed parameters
EPOCHS = 10
FINAL = FinalPoint(
    params_forward=HOST + A, train_flops=99_000.0, value=91.5, metric="final_test_acc"
)
# epoch -> slot -> (seed, stage, params) of the slots that hold a seed at the end of it
SLOTS: dict[int, dict[str, tuple[str, str, int]]] = {
    3: {"s0": ("a", "BLENDING", A)},  # isolation "none": blending in the epoch it was born
    4: {"s0": ("a", "BLENDING", A), "s1": ("b", "BLENDING", B)},
    5: {"s0": ("a", "HOLDING", A), "s1": ("b", "BLENDING", B)},
    6: {"s0": ("a", "HOLDING", A)},  # b pruned
    7: {"s0": ("a", "HOLDING", A)},
    8: {"s0": ("a", "FOSSILIZED", A)},
    9: {"s0": ("a", "FOSSILIZED", A), "s1": ("c", "TRAINING", C)},  # isolated: not blended
    10: {"s0": ("a", "FOSSILIZED", A)},  # c pruned before it touched the output
}


def flops(epoch: int) -> int:
    """The episode's training FLOPs so far: 1000 per epoch, more with each blended seed."""
    total = 0
    for k in range(1, epoch + 1):
        blended = [p for _, stage, p in SLOTS.get(k, {}).values() if stage != "TRAINING"]
        total += 1000 + sum(blended)
    return total


def epoch_event(
    epoch: int, episode: int = 0, grown: dict[int, dict[str, tuple[str, str, int]]] = SLOTS
) -> EpochCompleted:
    held = grown.get(epoch, {})
    slots = [
        SlotSummary(
            slot,
            held[slot][1] if slot in held else "DORMANT",
            held[slot][0] if slot in held else None,
            None,
            1.0 if slot in held else 0.0,
            None,
            held[slot][2] if slot in held else 0,
        )
        for slot in ("s0", "s1")
    ]
    return EpochCompleted(
        env=0,
        episode=episode,
        epoch=epoch,
        train_loss=1.0,
        train_acc=50.0,
        val_loss=2.0 - epoch / 10,
        val_acc=50.0 + epoch,
        test_loss=None,
        test_acc=None,
        action="WAIT",
        action_refused=None,
        reward=0.0,
        reward_components={},
        host_params=HOST,
        seed_params=sum(p for _, _, p in held.values()),
        slots=slots,
        epoch_time=0.1,
        train_flops=flops(epoch),
    )


def seed_events() -> list[Event]:
    """What the run records besides its epochs; the path does not need them."""
    at = {"env": 0, "episode": 0}
    return [
        SeedGerminated(**at, epoch=2, slot_id="s0", seed_id="a", blueprint="x", style="linear", tempo=3, params=A),
        StageChanged(**at, epoch=2, slot_id="s0", seed_id="a", from_stage="GERMINATED", to_stage="BLENDING"),
        GateEvaluated(**at, epoch=7, slot_id="s0", seed_id="a", gate="G5", passed=True, failed=[]),
        SeedFossilized(**at, epoch=8, slot_id="s0", seed_id="a", blueprint="x", contribution=None, params=A, germinated_epoch=2),
        SeedPruned(**at, epoch=6, slot_id="s1", seed_id="b", blueprint="x", stage="BLENDING", contribution=None, params=B, germinated_epoch=3, reason="policy"),
    ]  # fmt: skip


def episode_finished(episode: int = 0) -> EpisodeFinished:
    return EpisodeFinished(
        env=0,
        episode=episode,
        epochs=EPOCHS,
        final_val_acc=60.0,
        final_test_acc=FINAL.value,
        final_test_loss=0.5,
        total_reward=0.0,
        reward_components={},
        host_params=HOST,
        params_added=A,
        seeds_germinated=3,
        seeds_fossilized=1,
        seeds_pruned=2,
        rollbacks=0,
        refused_actions=0,
        seed=0,
        params_forward=HOST + A,
        train_flops=flops(EPOCHS),
    )


def write_run(directory: Path, events: list[Event]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / EVENTS_FILE).write_text("".join(dumps(e) + "\n" for e in events))
    return directory


def grown_run(directory: Path) -> Path:
    epochs = [epoch_event(k) for k in range(1, EPOCHS + 1)]
    return write_run(directory, [*seed_events(), *epochs, episode_finished()])


def test_the_path_has_a_point_at_each_growth_event_and_ends_at_the_final_test_point(
    tmp_path: Path,
) -> None:
    path = read_growth_path(grown_run(tmp_path / "run"), "tiny", "heuristic", 7, FINAL)
    assert path is not None and (path.task, path.policy, path.seed) == ("tiny", "heuristic", 7)

    def val(epoch: int, params: int, events: list[str]) -> PathPoint:
        return PathPoint(epoch, params, flops(epoch), 50.0 + epoch, "val_acc", events)

    assert path.points == [
        val(1, HOST, ["start"]),
        val(3, HOST + A, ["grew"]),
        val(4, HOST + A + B, ["grew"]),
        val(6, HOST + A, ["pruned"]),
        val(8, HOST + A, ["fossilized"]),
        val(10, HOST + A, ["last"]),
        PathPoint(10, HOST + A, 99_000.0, 91.5, "final_test_acc", ["end"]),
    ]
    assert [p.train_flops for p in path.points[:3]] == [1000, 3200, 4900]
    assert unstructure(path.points[1]) == {
        "epoch": 3,
        "params_forward": HOST + A,
        "train_flops": 3200.0,
        "value": 53.0,
        "metric": "val_acc",
        "events": ["grew"],
        "note": "",
    }


def test_a_loss_frontier_takes_the_validation_loss_along_the_path() -> None:
    final = FinalPoint(HOST + A, 99_000.0, 0.5, "final_test_loss")
    points = growth_path([epoch_event(k) for k in range(1, EPOCHS + 1)], final)
    assert points is not None
    assert [(p.metric, p.value) for p in points[:2]] == [("val_loss", 1.9), ("val_loss", 1.7)]
    assert (points[-1].metric, points[-1].value) == ("final_test_loss", 0.5)


def test_a_resumed_run_counts_each_epoch_once_in_epoch_order() -> None:
    """A resumed run writes again the epochs after its checkpoint: the last record wins."""
    epochs = [epoch_event(k) for k in range(1, EPOCHS + 1)]
    points = growth_path([*epochs[5:], *epochs[:7]], FINAL)
    assert points == growth_path(epochs, FINAL)


def test_a_run_that_never_grew_has_no_path(tmp_path: Path) -> None:
    """Its point in the results is all there is to draw."""
    epochs = [epoch_event(k, grown={}) for k in range(1, 4)]
    run = write_run(tmp_path / "run", [*epochs, episode_finished()])
    assert read_growth_path(run, "tiny", "heuristic", 0, FINAL) is None


@pytest.mark.parametrize("what", ["no events file", "no FLOPs recorded", "a damaged file"])
def test_a_run_that_did_not_record_the_path_has_none(tmp_path: Path, what: str) -> None:
    run = tmp_path / "run"
    if what == "no events file":
        run.mkdir()
    elif what == "a damaged file":  # cut in the middle of an epoch event
        text = (grown_run(run) / EVENTS_FILE).read_text()
        (run / EVENTS_FILE).write_text(text[: text.index('"epoch":5') + 20])
    else:  # written before the epoch events carried the episode's FLOPs: they read as 0
        lines = [
            dumps(epoch_event(k)).replace(f',"train_flops":{flops(k)}', "")
            for k in range(1, EPOCHS + 1)
        ]
        run.mkdir()
        (run / EVENTS_FILE).write_text("\n".join(lines) + "\n")
        assert all(e.train_flops == 0 for e in read_epochs(run) or [])
    assert read_growth_path(run, "tiny", "heuristic", 0, FINAL) is None


def test_only_the_finished_episode_is_read(tmp_path: Path) -> None:
    """Epochs of another episode in the same file (a training run's) are not mixed in."""
    other = [epoch_event(k, episode=1) for k in range(1, 3)]
    run = write_run(
        tmp_path / "run",
        [*(epoch_event(k) for k in range(1, EPOCHS + 1)), *other, episode_finished()],
    )
    epochs = read_epochs(run)
    assert epochs is not None and {e.episode for e in epochs} == {0} and len(epochs) == EPOCHS


WIDE = 14_000  # the host after a 4x width growth started at epoch 3, folded at 5


def widened_epoch(epoch: int) -> EpochCompleted:
    """The host alone, grown at the end of epoch 3: training FLOPs 1000 per epoch before,
    11000 after."""
    event = epoch_event(epoch, grown={})
    done = sum(1000 if k <= 3 else 11_000 for k in range(1, epoch + 1))
    host = HOST if epoch < 3 else WIDE
    return attrs.evolve(event, host_params=host, train_flops=done)


def host_events() -> list[HostGrowthStarted | HostGrowthFossilized]:
    at = {"env": 0, "episode": 0, "growth_id": "width-0", "operator": "width"}
    return [
        HostGrowthStarted(**at, epoch=3, plan="stage 0 -> 16", widths_before={"stage0": 4}, widths_after={"stage0": 16}, params_before=HOST, params_after=WIDE, tempo=2, curve="linear"),
        HostGrowthFossilized(**at, epoch=5, started_epoch=3, params_before=HOST, params_after=WIDE),
    ]  # fmt: skip


def test_a_host_growth_is_a_jump_in_parameters_with_its_operator_and_flops() -> None:
    final = FinalPoint(WIDE, 80_000.0, 70.0, "final_test_acc")
    epochs = [widened_epoch(k) for k in range(1, 7)]
    points = growth_path(epochs, final, host_events())
    assert points is not None
    assert [(p.epoch, p.params_forward, p.events) for p in points] == [
        (1, HOST, ["start"]),
        (3, HOST, []),  # the jump: the same epoch, FLOPs and value at the old size
        (3, WIDE, ["host_grew"]),
        (5, WIDE, ["host_fossilized"]),
        (6, WIDE, ["last"]),
        (6, WIDE, ["end"]),
    ]
    assert points[1].train_flops == points[2].train_flops == 3000
    assert points[2].note == "width 4x: parameters x14.0, FLOPs per epoch x11.0"
    # Without the host's events the run never grew: no path, as before schema 4.
    assert growth_path(epochs, final) is None


def test_a_static_arm_draws_only_its_hosts_growth(tmp_path: Path) -> None:
    """Seeds installed at birth are the architecture of a static arm, not growth."""
    final = FinalPoint(HOST + A, 99_000.0, 91.5, "final_test_acc")
    epochs = [epoch_event(k) for k in range(1, EPOCHS + 1)]
    assert growth_path(epochs, final, seeds=False) is None
    run = write_run(tmp_path / "run", [*host_events(), *epochs, episode_finished()])
    path = read_growth_path(run, "tiny", "static", 0, final, seeds=False)
    assert path is not None
    assert [p.events for p in path.points] == [
        ["start"],
        [],
        ["host_grew"],
        ["host_fossilized"],
        ["last"],
        ["end"],
    ]
