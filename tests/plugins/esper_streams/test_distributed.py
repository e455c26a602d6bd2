"""executors.distributed: env slices, gathered results, gradient averaging, rank-0 writing,
``--nproc`` equivalence with a single process, and failing ranks (2 gloo processes on CPU)."""

from __future__ import annotations

import csv
import functools
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from esper_streams.distributed import DistributedExecutor, DistributedOptions, env_slice
from esper_streams.launch import launch_local

from esper_core.components.executor import MultiProcessExecutor
from esper_core.plugins import PluginManager
from esper_core.run.checkpoint import load_checkpoint
from esper_core.run.executor import SerialExecutor
from esper_core.run.resolve import executor_context
from tests.plugin_set import first_party, plugin_manager
from tests.plugins.esper_streams import dist_jobs
from tests.plugins.esper_streams.helpers import FAKE_PLUGIN, drive, make_config, make_envs

CRASH_PLUGIN = str(Path(__file__).with_name("crash_plugin.py"))
CPU = torch.device("cpu")
# Wall-clock and naming fields: everything else of two equivalent runs must be identical.
UNSTABLE = {
    "time",
    "epoch_time",
    "wall_time",
    "run_name",
    "run_dir",
    "executor",
    "config",
    "rollout_sps",
    "update_sps",
    "update_time",
}


# ---------------------------------------------------------------- in one process


def test_env_slices_are_contiguous_balanced_and_cover_every_env() -> None:
    for n_envs in range(2, 9):
        for world in range(1, n_envs + 1):
            slices = [env_slice(n_envs, r, world) for r in range(world)]
            assert [i for s in slices for i in s] == list(range(n_envs))
            assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert [list(env_slice(3, r, 2)) for r in range(2)] == [[0], [1, 2]]


def test_a_single_rank_steps_every_env_like_serial() -> None:
    config = make_config("run.n_envs=2")
    executor = DistributedExecutor(DistributedOptions(), executor_context(config))
    assert isinstance(executor, MultiProcessExecutor) and executor.is_writer
    assert executor.env_devices(2) == [CPU, CPU] and list(executor.owned(2)) == [0, 1]
    one = drive(executor, make_envs(config, [CPU] * 2), epochs=2)
    serial = drive(
        SerialExecutor(None, executor_context(config)), make_envs(config, [CPU] * 2), epochs=2
    )
    assert [[r.reward for r in s] for s in one] == [[r.reward for r in s] for s in serial]
    assert [[r.observation for r in s] for s in one] == [[r.observation for r in s] for s in serial]
    executor.close()


# ---------------------------------------------------------------- two processes


def _ranks(out: Path, n: int = 2) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.mark.slow
def test_two_ranks_split_the_envs_gather_serial_results_and_average_gradients(
    tmp_path: Path,
) -> None:
    launch_local(2, functools.partial(dist_jobs.split_and_sync_job, str(tmp_path)), timeout=60)
    rank0, rank1 = _ranks(tmp_path)
    # Envs are split by index; each rank reset and trained only its own.
    assert rank0["owned"] == [0] and rank1["owned"] == [1, 2]
    assert rank0["stepped_here"] == [0] and rank1["stepped_here"] == [1, 2]
    # Both ranks saw the results of every env, and they are the single-process results.
    config = make_config("run.n_envs=3")
    serial = drive(
        SerialExecutor(None, executor_context(config)), make_envs(config, [CPU] * 3), epochs=3
    )
    expected = [[dist_jobs.summarize(r) for r in step] for step in serial]
    assert rank0["steps"] == rank1["steps"] == expected
    assert any(r["seed_params"] > 0 for r in expected[-1])
    # Env states are gathered on rank 0 only (for its checkpoint).
    assert rank0["states_on_this_rank"] == 3 and rank0["state_envs_epochs"] == [3, 3, 3]
    assert rank1["states_on_this_rank"] is None
    # bind_policy gave rank 1 rank 0's starting weights (they were 1.0 vs 2.0)...
    assert rank0["toy_start"] == rank1["toy_start"]
    assert rank0["toy_start"][0] == [1.0] * 6
    # ...and after every update the parameters are identical, with the mean gradient applied.
    assert rank0["toy_params"] == rank1["toy_params"]
    assert rank0["toy_grads"] == rank1["toy_grads"]
    x0, x1 = torch.full((4, 3), 1.0), torch.full((4, 3), 2.0)
    w = torch.nn.Linear(3, 2)
    with torch.no_grad():
        w.weight.fill_(1.0)
        w.bias.zero_()
    g = [torch.autograd.grad(w(x).pow(2).sum(), list(w.parameters())) for x in (x0, x1)]
    mean = [((a + b) / 2).flatten().tolist() for a, b in zip(*g)]
    assert rank0["toy_grads"][0] == mean  # small integers: exact in float32


@pytest.mark.slow
def test_ppo_training_is_data_parallel_with_identical_policies_on_both_ranks(
    tmp_path: Path,
) -> None:
    pytest.importorskip("esper_tamiyo_ppo")
    from esper_core.run import api

    overrides = [
        "run.task=tiny",
        "run.policy=ppo",
        "run.reward=acc_delta",
        "run.telemetry=[]",
        "run.n_envs=3",
        "env.max_epochs=4",
        "train.updates=3",
        "policies.ppo.target_kl=0",  # every minibatch runs: the chunk count below is exact
        # Two training batches an epoch instead of eight: what is checked is the policy's
        # update, the envs' rollouts only feed it.
        "env.max_batches=2",
    ]
    config = make_config(*overrides, "run.executor=distributed", "executors.distributed.timeout=60")
    job = functools.partial(
        dist_jobs.ppo_train_job, str(tmp_path), config, FAKE_PLUGIN, str(tmp_path / "two")
    )
    two = launch_local(2, job, timeout=60)
    rank0, rank1 = _ranks(tmp_path)
    # Identical policies on both ranks after every update, and they did learn each time.
    assert len(rank0["fingerprints"]) == 3
    assert rank0["fingerprints"] == rank1["fingerprints"]
    assert len(set(rank0["fingerprints"])) == 3
    # Each rank built only its own envs (the others are stand-ins without a model), then
    # the three evaluation envs: every rank evaluates, so none waits at a collective
    # while another plays the evaluation episodes...
    assert rank0["built"] == [0, 0, 1, 2] and rank1["built"] == [1, 2, 0, 1, 2]
    # ...and computed only its slice of every minibatch: together, the whole rollout
    # (3 envs x 4 steps x rollout_episodes, single-step chunks for the MLP) once per
    # update epoch.
    from esper_tamiyo_ppo.options import PPOOptions

    defaults = PPOOptions()
    chunks = 3 * 4 * defaults.rollout_episodes
    total = 3 * chunks * defaults.update_epochs  # updates x chunks x epochs
    assert rank0["chunks"] + rank1["chunks"] == total
    assert 0.4 * total <= rank0["chunks"] <= 0.6 * total  # balanced slices
    # The reference trains one update: only its first rollout and update are compared, and
    # neither depends on the count (update 0's learning rate and entropy coefficient are the
    # starting ones whatever train.updates is).
    one = api.train(
        make_config(*overrides, "train.updates=1"),
        plugin_manager(FAKE_PLUGIN),
        run_dir=tmp_path / "one",
        quiet=True,
        notify=lambda _: None,
    )
    # The first rollout is the single process's; its update is the same gradient summed
    # in another order (the whole minibatch's mean from two slices), so the numbers agree
    # to float precision rather than bit for bit.
    assert _stable(two["episodes"][:3]) == _stable(one["episodes"][:3])
    first_two, first_one = _stable(two["updates"][0]), _stable(one["updates"][0])
    assert first_two.keys() == first_one.keys()
    for key, value in first_one.items():
        assert first_two[key] == pytest.approx(value, rel=1e-3, abs=1e-5), key


def _stable(data: Any) -> Any:
    """``data`` without wall-clock and naming fields, at any depth."""
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items() if k not in UNSTABLE}
    if isinstance(data, list):
        return [_stable(v) for v in data]
    return data


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b))
        )
    return bool(a == b)


def _cli(*args: str) -> Any:
    return _cli_with(plugin_manager(), *args)


def _cli_with(manager: PluginManager, *args: str) -> Any:
    from esper_cli.main import build_cli

    group, pm = build_cli(manager)
    return CliRunner().invoke(group, list(args), obj={"pm": pm}, catch_exceptions=False)


# Autoloading is off in tests and the ranks of --nproc build their plugin manager from the
# command line: name the first-party plugins the in-process runs have (a KIND.NAME loads
# its entry point). Only the telemetry backends the runs write are named: naming one
# also adds it to run.telemetry; the other selections are overridden by the flags.
DIST_PLUGINS = [
    arg
    for name in first_party()
    if not name.startswith("telemetry.") or name in ("telemetry.jsonl", "telemetry.csv")
    for arg in ("--plugin", name)
]
DIST = ["--executor", "distributed", *DIST_PLUGINS]

RUN = [
    "run",
    "--plugin",
    FAKE_PLUGIN,
    "--task",
    "tiny",
    "--policy",
    "scripted",
    "--reward",
    "acc_delta",
    "--envs",
    "3",
    "--max-epochs",
    "4",
    "--quiet",
    "--set",
    'run.telemetry=["jsonl", "csv"]',
    "--set",
    "lifecycle.min_training_epochs=2",
    "--set",
    "run.episodes=2",
    # Two training batches an epoch instead of eight: the runs are compared, not trained.
    "--set",
    "env.max_batches=2",
]


@pytest.mark.slow
def test_nproc_2_writes_the_run_directory_of_a_single_process(tmp_path: Path) -> None:
    single = _cli(*RUN, "--out", str(tmp_path / "one"))
    assert single.exit_code == 0, single.output
    two = _cli(
        *RUN,
        "--out",
        str(tmp_path / "two"),
        *DIST,
        "--nproc",
        "2",
        "--set",
        "executors.distributed.timeout=60",
    )
    assert two.exit_code == 0, two.output
    one_dir, two_dir = tmp_path / "one", tmp_path / "two"
    assert sorted(p.name for p in one_dir.iterdir()) == sorted(p.name for p in two_dir.iterdir())
    summary = [json.loads((d / "summary.json").read_text()) for d in (one_dir, two_dir)]
    assert summary[0]["episodes_completed"] == 6
    assert _stable(summary[0]) == _stable(summary[1])
    # Only rank 0 wrote telemetry: every event once, the same events as one process.
    events = [
        [_stable(json.loads(line)) for line in (d / "events.jsonl").read_text().splitlines()]
        for d in (one_dir, two_dir)
    ]
    assert events[0] == events[1]
    rows = [
        [
            {k: v for k, v in row.items() if k != "epoch_time"}
            for row in csv.DictReader(io.StringIO((d / "metrics.csv").read_text()))
        ]
        for d in (one_dir, two_dir)
    ]
    assert len(rows[0]) == 3 * 4 * 2 and rows[0] == rows[1]
    config = [
        [
            line
            for line in (d / "config.toml").read_text().splitlines()
            if "executor" not in line
            and "timeout" not in line
            and "backend" not in line
            and "streams" not in line
        ]
        for d in (one_dir, two_dir)
    ]
    assert config[0] == config[1]
    a, b = load_checkpoint(one_dir / "checkpoint.pt"), load_checkpoint(two_dir / "checkpoint.pt")
    for key in ("outer", "epoch", "envs", "policy", "ledger", "updates"):
        assert _same(a[key], b[key]), key
    assert _stable(a["episodes"]) == _stable(b["episodes"])


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_with_an_error_naming_it(tmp_path: Path) -> None:
    result = _cli(
        *RUN,
        "--plugin",
        CRASH_PLUGIN,
        "--reward",
        "crash_on_rank",
        "--out",
        str(tmp_path / "r"),
        *DIST,
        "--nproc",
        "2",
        "--set",
        "executors.distributed.timeout=60",
    )
    assert result.exit_code == 2
    message = result.output
    assert message.startswith("error: rank 1 of 2 failed: ")
    assert "ZeroDivisionError: injected failure at epoch 2" in message
    assert "(rank 0 stopped as a consequence)" in message


@pytest.mark.slow
def test_a_hung_rank_ends_the_job_within_the_timeout(tmp_path: Path) -> None:
    # No clock in the test: on a loaded machine the start-up alone may take many seconds.
    # The timeout bounds each collective, joining the group included, so it must exceed
    # the gap between the two ranks' start-ups (spawned together, importing the same
    # modules: a few seconds under load), not a start-up itself; every second of it is
    # waited out once. The job still ends (a hang would run into the suite's own timeout)
    # with the rank named.
    timeout = 20
    result = _cli(
        *RUN,
        "--plugin",
        CRASH_PLUGIN,
        "--reward",
        "crash_on_rank",
        "--out",
        str(tmp_path / "r"),
        *DIST,
        "--nproc",
        "2",
        "--set",
        f"executors.distributed.timeout={timeout}",
        "--set",
        'rewards.crash_on_rank.mode="hang"',
    )
    assert result.exit_code == 2
    assert f"rank 1 of 2 did not answer within {timeout} s and was stopped" in result.output
    assert "Rank 0 reported" in result.output


@pytest.mark.slow
def test_a_rank_killed_under_torchrun_ends_the_job_within_the_timeout(tmp_path: Path) -> None:
    """SIGKILL leaves the rank no chance to report; with the default settings the job must
    still end within executors.distributed.timeout, with a message naming the rank."""
    import subprocess
    import sys

    from tests.plugin_set import subprocess_env

    timeout, stamp = DistributedOptions().timeout, tmp_path / "killed_at"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--no-python", sys.executable, "-m", "esper_cli", "run",
        "--plugin", FAKE_PLUGIN, "--plugin", CRASH_PLUGIN, "--plugin", "executors.distributed",
        "--task", "tiny", "--policy", "scripted", "--reward", "crash_on_rank",
        "--executor", "distributed", "--envs", "3", "--max-epochs", "4", "--quiet",
        "--set", "run.telemetry=[]",
        "--set", 'rewards.crash_on_rank.mode="kill"', "--set", f'rewards.crash_on_rank.stamp="{stamp}"',
        "--out", str(tmp_path / "r"),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=subprocess_env(), timeout=600, cwd=tmp_path
    )
    ended = time.time()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert stamp.is_file(), output  # rank 1 did get to the point where it was killed
    assert ended - float(stamp.read_text()) < timeout, output
    # torchrun names the rank that died first, and how.
    root_cause = output[output.index("Root Cause") :]
    assert "rank      : 1" in root_cause and "SIGKILL" in root_cause, output


def test_the_collective_timeout_defaults_to_a_minute_at_most() -> None:
    assert DistributedOptions().timeout <= 60


def test_nproc_needs_a_multi_process_executor() -> None:
    result = _cli(*RUN, "--nproc", "2")
    assert result.exit_code == 2
    assert (
        "--nproc: executor 'serial' runs in one process; use --executor distributed"
        in result.output
    )


@pytest.mark.slow
def test_an_interrupt_on_one_rank_stops_all_and_the_run_resumes_identically(tmp_path: Path) -> None:
    reference = _cli(*RUN, "--out", str(tmp_path / "ref"), "--json")
    assert reference.exit_code == 0, reference.output
    distributed = [
        *DIST,
        "--nproc",
        "2",
        "--set",
        "executors.distributed.timeout=60",
    ]
    # The interrupter sends SIGINT to rank 0 only (it is rank 0's telemetry): every rank must
    # agree to stop at the same epoch and take part in the checkpoint.
    cut = _cli(
        *RUN,
        "--out",
        str(tmp_path / "cut"),
        *distributed,
        "--set",
        'run.telemetry=["interrupter"]',
        "--set",
        "telemetry.interrupter.at_epoch=2",
        "--set",
        "telemetry.interrupter.at_outer=1",
    )
    assert cut.exit_code == 130, cut.output
    assert "interrupted at episode 1 epoch 2" in cut.output
    # Autoloading off, as a user who named the plugins at the start names them again on
    # resume, as KIND.NAME: this process and every rank load those entry points
    # (a manager that has loaded nothing but what is named).
    named = ["executors.distributed", "telemetry.jsonl", "telemetry.csv", "blueprints.cnn"]
    resumed = _cli_with(
        PluginManager(autoload=False),
        "run",
        "--resume",
        str(tmp_path / "cut"),
        "--plugin",
        FAKE_PLUGIN,
        *[arg for name in named for arg in ("--plugin", name)],
        "--nproc",
        "2",
        "--json",
        "--quiet",
    )
    assert resumed.exit_code == 0, resumed.output
    one = json.loads((tmp_path / "ref" / "summary.json").read_text())
    two = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert _stable(one) == _stable(two)


def test_another_ranks_env_is_a_stand_in_without_a_model() -> None:
    from esper_streams.errors import DistributedError
    from esper_streams.peers import PeerEnv

    template = make_envs(make_config(), [CPU])[0]
    peer = PeerEnv(2, 1, template)
    assert (peer.env_index, peer.space, peer.max_epochs) == (2, template.space, template.max_epochs)
    assert peer.host_params == template.host_params and peer.task is template.task
    assert not hasattr(peer, "model") and not hasattr(peer, "_started")
    with pytest.raises(AttributeError, match="env 2 lives on rank 1"):
        peer.step(None)
    with pytest.raises(DistributedError, match="has not been shared"):
        _ = peer.observation
    peer.show(template.observation)
    assert peer.observation is template.observation
    peer.load_state_dict({"ignored": True})  # the owner loads it


def test_a_single_rank_builds_every_env() -> None:
    config = make_config("run.n_envs=2")
    executor = DistributedExecutor(DistributedOptions(), executor_context(config))
    built = executor.build_envs(2, lambda i: make_envs(config, [CPU] * 2)[i])
    assert [type(e).__name__ for e in built] == ["MorphogeneticEnv", "MorphogeneticEnv"]
    executor.close()
