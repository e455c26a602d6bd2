"""The oracle menu: which entries each kind of host gets, from what its env says."""

from __future__ import annotations

import pytest

from esper_core.benchmark.menu import HostOffer, SlotOffer, build_menu, refusals
from esper_core.benchmark.probe import host_offer
from esper_core.benchmark.suite import SuiteError, build_suite, load_suite_file, split_problems
from esper_core.compare.experiment import PolicyEntry
from esper_core.config import RunConfig
from esper_core.converter import structure
from tests.core.benchmark.helpers import USER_MLP, pair, suite
from tests.plugin_set import REPO, plugin_manager

MOMENTS = (0.1, 0.5)


def labels(offer: HostOffer) -> list[str]:
    return [e.label for e in build_menu(offer, MOMENTS, 2.0, 2)]


def test_a_cnn_host_gets_a_seed_per_slot_widening_and_deepening_at_every_moment() -> None:
    offer = HostOffer("cnn", (SlotOffer("r0c0", ("conv_layer",)),), deepen_mode="identity")
    menu = build_menu(offer, MOMENTS, 4.0, 2)
    assert [e.label for e in menu] == [
        "wait",
        "conv_layer-r0c0-at0.1",
        "conv_layer-r0c0-at0.5",
        "widen-at0.1",
        "widen-at0.5",
        "deepen-at0.1",
        "deepen-at0.5",
    ]
    assert menu[1].policy == "schedule"
    assert menu[1].options == {"seeds": ["conv_layer@r0c0"], "at": 0.1}
    assert menu[3].options == {"widen_at": 0.1, "widen_factor": 4.0}
    assert menu[5].options == {"deepen_at": 0.1, "deepen_factor": 2, "deepen_mode": "identity"}


def test_refused_operators_leave_the_menu_with_the_envs_reason() -> None:
    offer = HostOffer("mlp", (SlotOffer("body/1", ("residual",)),), deepen_refused="no depth")
    assert labels(offer) == [
        "wait",
        "residual-body.1-at0.1",  # a module path's "/" cannot name a directory
        "residual-body.1-at0.5",
        "widen-at0.1",
        "widen-at0.5",
    ]
    assert refusals(offer) == ["deepen: no depth"]
    assert labels(HostOffer("cnn", widen_refused="w", deepen_refused="d")) == ["wait"]


def test_opt_in_blueprints_go_into_the_seed_entries_env_blueprints() -> None:
    offer = HostOffer(
        "cnn", (SlotOffer("r0c0", ("conv_layer",)),), env_blueprints=("cnn/norm", "cnn/conv_layer")
    )
    seed, widen = build_menu(offer, (0.1,), 2.0, 2)[1:3]
    assert seed.arm().config == {"env": {"blueprints": ["cnn/norm", "cnn/conv_layer"]}}
    assert widen.arm().config == {}


@pytest.mark.slow  # three hosts built four times each: about 15 s on a loaded machine
def test_the_envs_say_what_a_cnn_a_transformer_and_a_users_mlp_take() -> None:
    found = suite(
        pair("digits-impaired", "digits", preset="impaired"),
        pair("charlm-impaired", "charlm", preset="impaired", max_chars=20000),
        pair("user-mlp", "dataset", **USER_MLP),
    )
    pm = plugin_manager()
    cnn, transformer, user = (host_offer(found, p, pm) for p in found.pairs)
    # digits `impaired`: one slot; conv_layer is opt-in, so its entries name it; one conv
    # per stage has nothing to stack, so depth grows by fresh layers.
    assert cnn.slots == (SlotOffer("r0c0", ("conv_layer",)),)
    assert cnn.env_blueprints is not None and "cnn/conv_layer" in cnn.env_blueprints
    assert (cnn.widen_refused, cnn.deepen_refused, cnn.deepen_mode) == (None, None, "identity")
    assert [s.slot_id for s in transformer.slots] == ["r0c0", "r0c1"]
    assert (transformer.widen_refused, transformer.deepen_refused) == (None, None)
    assert transformer.deepen_mode == "stack"
    assert user.topology == "mlp"
    assert [s.slot_id for s in user.slots] == ["body/1", "body/3"]
    assert user.widen_refused is None
    assert user.deepen_refused is not None and "cannot grow in depth" in user.deepen_refused


def test_a_host_in_both_splits_is_refused() -> None:
    found = suite(
        pair("a", "digits", "evaluation", preset="base", split_seed=0),
        pair("b", "digits", "training", preset="base", split_seed=1),  # data, not host
        pair("c", "digits", "training", preset="small"),
    )
    problems = split_problems(found.pairs)
    assert len(problems) == 1 and "'a' (evaluation) and 'b' (training)" in problems[0]


def test_tuning_seeds_that_are_evaluation_seeds_are_refused() -> None:
    with pytest.raises(SuiteError, match="tuning_seeds: 1 among the evaluation seeds"):
        suite(pair("a", "digits"), seeds=3, tuning_seeds=[1, 100])


def test_the_shipped_suite_holds_eight_evaluation_pairs_and_two_user_models() -> None:
    spec = load_suite_file(REPO / "examples" / "suites" / "controller-suite.toml")
    found = build_suite(spec, structure(spec.config, RunConfig))
    evaluation = found.split("evaluation")
    assert len(evaluation) >= 8 and found.split("training")
    assert sum(p.task.name == "dataset" for p in evaluation) >= 2
    assert len(found.tuning_seeds) >= 5 and len(found.seeds) == 10
    assert not split_problems(found.pairs)


def test_the_oracle_is_evaluated_with_its_entrys_options_and_config() -> None:
    from esper_core.benchmark.phases import ORACLE, evaluation_arms

    offer = HostOffer(
        "cnn", (SlotOffer("r0c0", ("conv_layer",)),), env_blueprints=("cnn/norm", "cnn/conv_layer")
    )
    entry = build_menu(offer, (0.1,), 2.0, 2)[1]
    found = suite(pair("digits-impaired", "digits", preset="impaired"))
    wait, oracle = evaluation_arms(found, entry, "evaluation")[:2]
    assert wait.label == "wait"
    # an opt-in blueprint's entry ran with env.blueprints naming it on the tuning seeds;
    # without it every evaluation run of the oracle is refused
    assert (oracle.label, oracle.spec, oracle.options, oracle.config) == (
        ORACLE,
        "schedule",
        {"seeds": ["conv_layer@r0c0"], "at": 0.1},
        {"env": {"blueprints": ["cnn/norm", "cnn/conv_layer"]}},
    )


def test_candidates_run_on_the_training_pairs_only() -> None:
    from esper_core.benchmark.phases import evaluation_arms

    slowdown = PolicyEntry(name="heuristic", label="slowdown", options={"trigger": "slowdown"})
    found = suite(
        pair("digits-impaired", "digits", preset="impaired"),
        pair("digits-base", "digits", "training", preset="base"),
        candidates=[slowdown],
    )
    training = [a.label for a in evaluation_arms(found, None, "training")]
    assert training == ["wait", "heuristic", "slowdown"]
    assert [a.label for a in evaluation_arms(found, None, "evaluation")] == ["wait", "heuristic"]
    assert found.candidates[0].options == {"trigger": "slowdown"}


def test_a_candidate_may_not_take_a_policys_label() -> None:
    twin = PolicyEntry(name="heuristic", options={"trigger": "slowdown"})
    with pytest.raises(SuiteError, match="heuristic"):
        suite(pair("digits-base", "digits", "training", preset="base"), candidates=[twin])
