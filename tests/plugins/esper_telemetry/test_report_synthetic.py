"""``esper report`` on a long synthetic training run: many updates, prunes, rollbacks, PPO."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from esper_telemetry.jsonl import JsonlBackend, JsonlOptions
from esper_telemetry.report import (
    FIGURES,
    LEARNING_FIGURE,
    REPORT_FILE,
    build_report,
    load_run,
)

from esper_core import TelemetryContext
from esper_core.run.telemetry import (
    EpisodeFinished,
    GovernorRollback,
    PolicyEvaluation,
    PolicyUpdate,
    RunFinished,
    SeedFossilized,
    SeedGerminated,
    SeedPruned,
)
from tests.plugins.esper_telemetry.helpers import epoch_event, run_started, slot_summary

UPDATES, ENVS, EPOCHS = 30, 2, 6


def training_events() -> list[list[Any]]:
    """Each env germinates in r0c0 at 0; it is fossilized at 4 in even updates and pruned at 3
    by the policy in odd ones; env 1 rolls back at epoch 5 of every third update."""
    batches: list[list[Any]] = [[run_started(ENVS, UPDATES, EPOCHS, mode="train")]]
    for update in range(UPDATES):
        for epoch in range(1, EPOCHS + 1):
            batch: list[Any] = []
            for env in range(ENVS):
                common = {
                    "env": env,
                    "episode": update,
                    "slot_id": "r0c0",
                    "seed_id": "r0c0-s1",
                    "blueprint": "cnn/res",
                }
                fossil = update % 2 == 0
                rollback = env == 1 and update % 3 == 0 and epoch == 5
                if epoch == 1:
                    batch.append(
                        SeedGerminated(epoch=0, style="gated", tempo=3, params=12, **common)
                    )
                if epoch == 5 and fossil and not (env == 1 and update % 3 == 0):
                    batch.append(
                        SeedFossilized(
                            epoch=4, contribution=1.5, params=12, germinated_epoch=0, **common
                        )
                    )
                if epoch == 4 and not fossil:
                    batch.append(
                        SeedPruned(
                            epoch=3,
                            stage="TRAINING",
                            contribution=-0.5,
                            params=12,
                            germinated_epoch=0,
                            reason="policy",
                            **common,
                        )
                    )
                if rollback and fossil:
                    batch.append(
                        GovernorRollback(
                            env=env,
                            episode=update,
                            epoch=5,
                            reason="loss spike",
                            val_loss=9.0,
                            penalty=-10.0,
                            snapshot_epoch=0,
                        )
                    )
                    batch.append(
                        SeedPruned(
                            epoch=5,
                            stage="HOLDING",
                            contribution=0.1,
                            params=12,
                            germinated_epoch=0,
                            reason="rollback",
                            **common,
                        )
                    )
                stage = (
                    "GERMINATED"
                    if epoch == 1
                    else "TRAINING"
                    if epoch < 4
                    else ("HOLDING" if epoch == 4 else "FOSSILIZED")
                    if fossil
                    else "PRUNED"
                    if epoch == 4
                    else "EMBARGOED"
                )
                if env == 1 and update % 3 == 0 and fossil and epoch >= 5:
                    stage = "PRUNED" if epoch == 5 else "EMBARGOED"
                components = {"accuracy": 0.2 - 0.05 * epoch, "shaping": 0.1, "rent": -0.05}
                if rollback and fossil:
                    components["governor_penalty"] = -10.0
                event = epoch_event(
                    env, update, epoch, components=components, update=update, test=epoch % 3 == 0
                )
                slots = [
                    slot_summary(
                        "r0c0",
                        stage,
                        1.0 if stage in ("HOLDING", "FOSSILIZED") else 0.0,
                        "r0c0-s1" if stage not in ("PRUNED", "EMBARGOED") else None,
                    ),
                    slot_summary("r0c1", "DORMANT"),
                ]
                batch.append(attrs.evolve(event, slots=slots, val_acc=50 + update + epoch + env))
                if epoch == EPOCHS:
                    batch.append(
                        EpisodeFinished(
                            env=env,
                            episode=update,
                            epochs=EPOCHS,
                            final_val_acc=60.0 + update,
                            final_test_acc=58.0 + update,
                            final_test_loss=0.5,
                            total_reward=0.3,
                            reward_components={"accuracy": 0.0, "shaping": 0.6, "rent": -0.3},
                            host_params=100,
                            params_added=12,
                            seeds_germinated=1,
                            seeds_fossilized=int(fossil),
                            seeds_pruned=int(not fossil),
                            rollbacks=0,
                            refused_actions=0,
                            seed=env,
                            update=update,
                        )
                    )
            batches.append(batch)
        batches.append(
            [
                PolicyUpdate(
                    update=update,
                    diagnostics={
                        "policy_loss": -0.01 * update,
                        "approx_kl": 0.01,
                        "clip_fraction": 0.1,
                        "explained_variance": update / UPDATES,
                        "entropy/op": 1.0 - update / UPDATES,
                        "entropy/blueprint": 2.0 - update / UPDATES,
                    },
                )
            ]
        )
        if update % 10 == 0:
            batches.append([evaluation("trained", update, 70.0 + update)])
    batches.insert(1, [evaluation("wait", None, 75.0), evaluation("heuristic", None, 95.0)])
    batches.append([RunFinished(status="completed", wall_time=42.0)])
    return batches


def evaluation(policy: str, update: int | None, accuracy: float) -> PolicyEvaluation:
    return PolicyEvaluation(
        update=update,
        policy=policy,
        seeds=[100, 101],
        final_val_acc=[accuracy, accuracy + 1],
        final_test_acc=[accuracy - 1, accuracy + 1],
        total_reward=[1.0, 1.1],
        seeds_fossilized=[1, 0],
        params_added=[12, 0],
    )


@pytest.fixture(scope="module")
def training_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("synthetic") / "train-run"
    backend = JsonlBackend(JsonlOptions(), TelemetryContext(run_dir=run_dir, quiet=True))
    for batch in training_events():
        backend.handle(batch)
        backend.flush()
    backend.close()
    return run_dir


def test_long_training_run_report(training_run: Path) -> None:
    from matplotlib.image import imread

    written = build_report(training_run)
    assert [p.name for p in written] == [*FIGURES, LEARNING_FIGURE, REPORT_FILE]
    for name in (*FIGURES, LEARNING_FIGURE):
        pixels = imread(training_run / name)
        assert float(pixels[..., :3].std()) > 0.08, name
    report = (training_run / REPORT_FILE).read_text(encoding="utf-8")
    assert f"]({LEARNING_FIGURE})" in report
    assert "`esper train`" in report
    assert "## Governor rollbacks" in report and "loss spike" in report
    assert "## PPO updates" in report and "approx_kl" in report
    data = load_run(training_run)
    fates = [r.fate for r in data.ledger.rows()]
    assert len(fates) == UPDATES * ENVS
    assert fates.count("pruned") == UPDATES // 2 * ENVS
    assert fates.count("pruned_by_rollback") == 5  # env 1 in updates 0, 6, 12, 18, 24
    seeds = report.split("## Seeds", 1)[1].split("##", 1)[0]
    assert seeds.count("| pruned (rollback) |") == 5
    assert seeds.count("| pruned (policy) |") == fates.count("pruned")
    assert seeds.count("| fossilized |") == fates.count("fossilized")


def test_the_learning_curve_reads_evaluations_and_diagnostics(training_run: Path) -> None:
    from esper_telemetry.report.learning_curve import has_training, training_figure

    data = load_run(training_run)
    assert has_training(data)
    assert [(e.policy, e.update) for e in data.evaluations] == [
        ("wait", None),
        ("heuristic", None),
        ("trained", 0),
        ("trained", 10),
        ("trained", 20),
    ]
    figure = training_figure(data)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles[0] == "episode return (rollout episodes)"
    assert titles[1].startswith("greedy evaluation")
    legend = [t.get_text() for t in figure.axes[1].get_legend().get_texts()]
    assert legend == ["ppo (greedy)", "wait (75.0)", "heuristic (95.0)"]
    heads = [t.get_text() for t in figure.axes[2].get_legend().get_texts()]
    assert heads == ["op", "blueprint"]
    assert titles[3:] == [
        "approximate KL per update",
        "clip fraction",
        "explained variance",
    ]
    # a run without evaluations says so in its panel instead of drawing nothing
    bare = attrs.evolve(data, evaluations=[])
    texts = [t.get_text() for t in training_figure(bare).axes[1].texts]
    assert texts == ["no greedy evaluation (train.eval_every = 0?)"]
