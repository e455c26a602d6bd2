"""executors.streams: identical to serial on CPU, and its stream protocol checked with a
recording double of the stream/event API (no GPU needed)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from esper_streams.devices import check_one_type, parse_device
from esper_streams.stream_api import CudaStreams, NullStreams, StreamAPI, default_stream_api
from esper_streams.streams import StreamsExecutor, StreamsOptions

from esper_core.env.training import EpochTrainer
from esper_core.errors import ConfigError
from esper_core.run.executor import SerialExecutor
from esper_core.run.resolve import executor_context
from tests.fakes import allow_fp16_on_cpu
from tests.plugins.esper_streams.helpers import (
    drive,
    make_config,
    make_envs,
    params_of,
    without_time,
)

CPU = torch.device("cpu")


# ---------------------------------------------------------------- CPU: bit-identical to serial


def test_streams_on_cpu_gives_exactly_the_serial_results() -> None:
    config = make_config("run.n_envs=3")
    serial_envs = make_envs(config, [CPU] * 3)
    stream_envs = make_envs(config, [CPU] * 3)
    serial = drive(SerialExecutor(None, executor_context(config)), serial_envs, epochs=5)
    streams = drive(
        StreamsExecutor(StreamsOptions(), executor_context(config)), stream_envs, epochs=5
    )
    # The scripted policy germinated, and the seeds trained (they had gradient statistics).
    assert all(r.metrics.batches > 0 for step in serial for r in step)
    assert all(env.model.seed_param_count() > 0 for env in serial_envs)
    assert all(env.last_train.seeds for env in serial_envs)
    for a_step, b_step in zip(serial, streams, strict=True):
        assert [without_time(r) for r in a_step] == [without_time(r) for r in b_step]
    for a, b in zip(serial_envs, stream_envs, strict=True):
        pa, pb = params_of(a), params_of(b)
        assert pa.keys() == pb.keys()
        assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_envs_are_placed_round_robin_over_devices_as_device_objects() -> None:
    two_gpus = [torch.device("cuda", 0), torch.device("cuda", 1)]
    executor = StreamsExecutor(StreamsOptions(), None, devices=two_gpus, stream_api=NullStreams())
    placed = executor.env_devices(5)
    assert placed == [two_gpus[i % 2] for i in range(5)]
    assert all(isinstance(d, torch.device) for d in placed)
    # Without run.devices the executor falls back to run.device.
    assert StreamsExecutor(
        StreamsOptions(), executor_context(make_config("run.device=cpu"))
    ).env_devices(2) == [
        CPU,
        CPU,
    ]
    assert StreamsExecutor(
        StreamsOptions(), executor_context(make_config('run.devices=["cpu"]'))
    ).devices == [CPU]


def test_device_checks_name_the_field_and_the_fix() -> None:
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"run.devices: 'cuda:1' needs CUDA.*--device cpu"):
            parse_device("cuda:1", "run.devices")
    with pytest.raises(ConfigError, match="mixes cpu and cuda devices"):
        check_one_type([CPU, torch.device("cuda", 0)], "run.devices")
    assert parse_device("cpu", "run.device") == CPU


def test_the_real_stream_api_is_chosen_only_for_cuda_devices() -> None:
    assert isinstance(default_stream_api([CPU], True), NullStreams)
    assert isinstance(default_stream_api([torch.device("cuda", 0)], True), CudaStreams)
    assert isinstance(default_stream_api([torch.device("cuda", 0)], False), NullStreams)
    assert isinstance(CudaStreams(), StreamAPI) and isinstance(NullStreams(), StreamAPI)


def test_one_grad_scaler_per_env() -> None:
    envs = make_envs(make_config("run.n_envs=3"), [CPU] * 3)
    scalers = [env.trainer.scaler for env in envs]
    assert len({id(s) for s in scalers}) == 3


# ---------------------------------------------------------------- the recording double


class FakeStream:
    """A stream with a vector clock: ``clock[s]`` = how much of stream s's work it is ordered after."""

    def __init__(self, name: str, device: torch.device) -> None:
        self.name = name
        self.device = device
        self.clock: Counter[FakeStream] = Counter()

    def __repr__(self) -> str:
        return f"<{self.name} on {self.device}>"


class FakeEvent:
    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream
        self.clock = Counter(stream.clock)


class RecordingStreams:
    """The StreamAPI as a recording double with happens-before bookkeeping."""

    def __init__(self) -> None:
        self.defaults: dict[torch.device, FakeStream] = {}
        self.created: list[FakeStream] = []
        self.stack: list[FakeStream] = []
        self.log: list[tuple[Any, ...]] = []
        self.synchronizations = 0

    def default(self, device: torch.device) -> FakeStream:
        return self.defaults.setdefault(device, FakeStream(f"default:{device}", device))

    def work_on_default(self, device: torch.device) -> None:
        """The caller queues work (a reset, a checkpoint) on the device's current stream."""
        stream = self.default(device)
        stream.clock[stream] += 1

    def new_stream(self, device: torch.device) -> FakeStream:
        stream = FakeStream(f"env-stream-{len(self.created)}", device)
        self.created.append(stream)
        self.log.append(("new_stream", stream, device))
        return stream

    def current_stream(self, device: torch.device) -> FakeStream:
        for stream in reversed(self.stack):
            if stream.device == device:
                return stream
        return self.default(device)

    @contextlib.contextmanager
    def use(self, stream: FakeStream) -> Iterator[FakeStream]:
        stream.clock[stream] += 1  # whatever runs in the context is new work of this stream
        self.log.append(("use", stream, Counter(stream.clock)))
        self.stack.append(stream)
        try:
            yield stream
        finally:
            self.stack.pop()

    def record_stream(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.log.append(("record_stream", tensor, stream))

    def record_event(self, stream: FakeStream) -> FakeEvent:
        event = FakeEvent(stream)
        self.log.append(("record_event", stream, event))
        return event

    def wait_event(self, stream: FakeStream, event: FakeEvent) -> None:
        for source, count in event.clock.items():
            stream.clock[source] = max(stream.clock[source], count)
        self.log.append(("wait_event", stream, event))

    def synchronize(self, stream: FakeStream) -> None:
        self.synchronizations += 1
        self.log.append(("synchronize", stream))


SYNCING = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu")


def _to_host(args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    """Whether a ``Tensor.to`` call names the CPU as its destination."""
    for value in (*args, kw.get("device")):
        if isinstance(value, torch.device | str) and torch.device(value).type == "cpu":
            return True
    return False


@pytest.fixture(scope="module", params=["off", "bf16", "fp16"])
def recorded(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Three CPU envs stepped by the streams executor through the recording double, with
    spies on the trainer (every accumulator write), validation, ``fetch`` and host
    synchronisations; once per ``training.amp`` (fp16 with an enabled CPU GradScaler,
    the same class as on CUDA). The spies are removed again before the tests look at
    what they recorded."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        if request.param == "fp16":
            allow_fp16_on_cpu(monkeypatch)
        return _record(monkeypatch, request.param)


def _record(monkeypatch: pytest.MonkeyPatch, amp: str) -> dict[str, Any]:
    import esper_core.env.env as env_module
    import esper_core.env.pending as pending_module

    api = RecordingStreams()
    config = make_config("run.n_envs=3", f'training.amp="{amp}"')
    envs = make_envs(config, [CPU] * 3)
    executor = StreamsExecutor(StreamsOptions(), executor_context(config), stream_api=api)
    state: dict[str, Any] = {
        "in_batch_loop": False,
        "syncs": Counter(),
        "trainer_calls": [],
        "fetches": [],
        "batches": {i: [] for i in range(3)},
        "epoch_start": [],
        "timeline": [],  # ("validate", env_index, stream) and ("fetch", clocks) in order
        "amp": amp,
    }

    def spy_trainer(name: str) -> None:
        original = getattr(EpochTrainer, name)

        def inner(self: EpochTrainer, *args: Any, **kwargs: Any) -> Any:
            if name == "train_batch":
                state["in_batch_loop"] = True
            if name == "end_epoch":
                state["in_batch_loop"] = False
            out = original(self, *args, **kwargs)
            current = api.stack[-1] if api.stack else None
            state["trainer_calls"].append((self, name, current, out))
            return out

        monkeypatch.setattr(EpochTrainer, name, inner)

    for name in ("begin_epoch", "train_batch", "end_epoch"):
        spy_trainer(name)

    original_fetch = pending_module.fetch

    def fetch(*pendings: Any) -> Any:
        current = api.stack[-1] if api.stack else None
        state["fetches"].append((current, [p.tensor for p in pendings]))
        # What the reading stream is ordered after, and how much work each env stream has.
        reader = current or api.default(CPU)
        clocks = {s: (reader.clock[s], s.clock[s]) for s in api.created}
        state["timeline"].append(("fetch", current, clocks))
        return original_fetch(*pendings)

    monkeypatch.setattr(pending_module, "fetch", fetch)
    monkeypatch.setattr(env_module, "fetch", fetch)

    original_validate = env_module.validate_pending

    def validate_pending(model: Any, *args: Any, **kwargs: Any) -> Any:
        index = next(i for i, env in enumerate(envs) if env.model is model)
        state["timeline"].append(("validate", index, api.stack[-1] if api.stack else None))
        return original_validate(model, *args, **kwargs)

    monkeypatch.setattr(env_module, "validate_pending", validate_pending)

    for method in SYNCING:
        original = getattr(torch.Tensor, method)

        def counted(
            self: torch.Tensor, *args: Any, _name: str = method, _orig: Any = original, **kw: Any
        ) -> Any:
            if state["in_batch_loop"]:
                state["syncs"][_name] += 1
            return _orig(self, *args, **kw)

        monkeypatch.setattr(torch.Tensor, method, counted)

    # Device -> host copies (a tensor of another device copied to the CPU): the host
    # waits for them. (On these CPU envs there is no other device, so this spy only
    # bites where the same code runs on a GPU; the readers above cover the CPU.)
    original_to, original_copy = torch.Tensor.to, torch.Tensor.copy_

    def to(self: torch.Tensor, *args: Any, **kw: Any) -> Any:
        if state["in_batch_loop"] and self.device.type != "cpu" and _to_host(args, kw):
            state["syncs"]["to(cpu)"] += 1
        return original_to(self, *args, **kw)

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> Any:
        if state["in_batch_loop"] and self.device.type == "cpu" and src.device.type != "cpu":
            state["syncs"]["copy_ to cpu"] += 1
        return original_copy(self, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)

    def counted_sync(name: str, original: Any) -> Any:
        def synchronize(*args: Any, **kw: Any) -> Any:
            if state["in_batch_loop"]:
                state["syncs"][name] += 1
            return original(*args, **kw)

        return synchronize

    for owner, name in (
        (torch.cuda, "synchronize"),
        (torch.cuda.Stream, "synchronize"),
        (torch.cuda.Event, "synchronize"),
    ):
        monkeypatch.setattr(
            owner, name, counted_sync(f"{owner.__name__}.{name}", getattr(owner, name))
        )

    original_sync = api.synchronize

    def synchronize(stream: FakeStream) -> None:
        if state["in_batch_loop"]:
            state["syncs"]["synchronize"] += 1
        original_sync(stream)

    monkeypatch.setattr(api, "synchronize", synchronize)

    for i, env in enumerate(envs):
        original_train_batch = env.train_batch

        def train_batch(batch: Any, _i: int = i, _orig: Any = original_train_batch) -> None:
            state["batches"][_i].append(tuple(batch))
            _orig(batch)

        monkeypatch.setattr(env, "train_batch", train_batch)

    class Recording:
        """Drives the executor, marking the caller's own work on the default stream."""

        def step(self, envs_: Any, actions: Any) -> Any:
            api.work_on_default(CPU)  # e.g. the runner's reset or checkpoint before this step
            state["epoch_start"].append((len(api.log), Counter(api.default(CPU).clock)))
            state["timeline"].append(("step",))
            results = executor.step(envs_, actions)
            state.setdefault("epoch_end", []).append(len(api.log))
            return results

    state["results"] = drive(Recording(), envs, epochs=4)
    state["api"], state["envs"], state["executor"] = api, envs, executor
    return state


def test_one_stream_per_env_created_on_the_env_device_and_kept(recorded: dict[str, Any]) -> None:
    api: RecordingStreams = recorded["api"]
    assert len(api.created) == 3  # one per env, reused across the 4 steps
    assert [s.device for s in api.created] == [env.device for env in recorded["envs"]]


def test_an_env_keeps_its_stream_when_a_step_gets_some_envs_only() -> None:
    """Shared epochs step a seed group's lead alone: env 2, second in that step, keeps the
    stream it had as third."""
    from esper_core.lifecycle.actions import WAIT
    from tests.fakes import make_env

    api = RecordingStreams()
    executor = StreamsExecutor(StreamsOptions(), None, devices=[CPU], stream_api=api)
    envs = [make_env("env.max_batches=1", env_index=i, seed=i) for i in range(3)]
    executor.step(envs, [WAIT] * 3)
    executor.step([envs[0], envs[2]], [WAIT] * 2)
    assert len(api.created) == 3


def test_every_accumulation_runs_on_its_env_stream(recorded: dict[str, Any]) -> None:
    api: RecordingStreams = recorded["api"]
    stream_of = {id(env.trainer): api.created[i] for i, env in enumerate(recorded["envs"])}
    calls = recorded["trainer_calls"]
    assert {name for _, name, _, _ in calls} == {"begin_epoch", "train_batch", "end_epoch"}
    for trainer, name, current, _ in calls:
        assert current is stream_of[id(trainer)], f"{name} ran on {current}, not its env's stream"
    # Each env's validation (with its counterfactuals) is queued on that env's stream.
    validations = [entry for entry in recorded["timeline"] if entry[0] == "validate"]
    assert validations
    for _, index, current in validations:
        assert current is api.created[index]


def _steps(timeline: list[Any]) -> list[list[Any]]:
    """The timeline cut at the start of each executor step."""
    steps: list[list[Any]] = []
    for entry in timeline:
        if entry[0] == "step":
            steps.append([])
        elif steps:
            steps[-1].append(entry)
    return steps


def test_every_env_validation_is_queued_before_one_fetch_reads_them_all(
    recorded: dict[str, Any],
) -> None:
    """Validation overlaps across streams: nothing is read until every env has queued
    its validation and counterfactuals, then ONE fetch reads every env's numbers."""
    calls = recorded["trainer_calls"]
    epoch_numbers = [out.tensor for _, name, _, out in calls if name == "end_epoch"]
    steps = _steps(recorded["timeline"])
    assert len(steps) == 4
    fetched = [tensors for _, tensors in recorded["fetches"]]
    for entries in steps:
        kinds = [entry[0] for entry in entries]
        # Validation (and, when due, the test split) of every env, then one fetch.
        assert kinds.count("fetch") == 1 and kinds[-1] == "fetch", kinds
        assert {entry[1] for entry in entries[:-1]} == {0, 1, 2}
        _, reader, clocks = entries[-1]
        assert reader is None  # the caller's stream reads...
        for stream, (ordered_after, done) in clocks.items():
            # ...only after waiting for all the work queued on every env stream.
            assert ordered_after >= done, f"the fetch did not wait for {stream}"
    # The one fetch of each step holds the epoch numbers of all three envs.
    assert len(fetched) == 4
    for step_tensors, step in zip(fetched, range(4)):
        mine = epoch_numbers[3 * step : 3 * step + 3]
        assert all(any(t is m for t in step_tensors) for m in mine)


def test_every_cross_stream_read_follows_a_wait(recorded: dict[str, Any]) -> None:
    api: RecordingStreams = recorded["api"]
    default = api.default(CPU)
    for start, end, (_, default_clock) in zip(
        [s for s, _ in recorded["epoch_start"]],
        recorded["epoch_end"],
        recorded["epoch_start"],
        strict=True,
    ):
        window = api.log[start:end]
        # Env streams run only after the caller's earlier work on the device (an event wait).
        uses = [entry for entry in window if entry[0] == "use"]
        assert uses
        for _, stream, clock in uses:
            assert clock[default] >= default_clock[default], (
                f"{stream} ran before waiting for the caller"
            )
        # When the step returns, the caller's stream is ordered after all work of every env stream.
        for stream in api.created:
            assert default.clock[stream] >= stream.clock[stream], (
                f"the caller did not wait for {stream}"
            )


def test_inputs_are_record_streamed_on_the_consuming_stream(recorded: dict[str, Any]) -> None:
    api: RecordingStreams = recorded["api"]
    recorded_on = [(entry[1], entry[2]) for entry in api.log if entry[0] == "record_stream"]
    n_batches = 0
    for i, batches in recorded["batches"].items():
        for batch in batches:
            for tensor in batch:
                n_batches += 1
                assert any(t is tensor and s is api.created[i] for t, s in recorded_on)
    assert n_batches > 0


def test_the_batch_loop_never_synchronises_with_the_host(recorded: dict[str, Any]) -> None:
    """0 host syncs per batch with amp off, bf16 and fp16 (GradScaler enabled: its step
    must not call .item(), so the optimizers take the inf check on the device)."""
    assert sum(len(b) for b in recorded["batches"].values()) >= 3 * 4 * 2
    envs = recorded["envs"]
    if recorded["amp"] == "fp16":
        assert all(env.trainer.scaler.is_enabled() for env in envs)
        # Seeds trained under the scaler too (the scripted policy germinated).
        assert all(env.trainer.seed_optimizers for env in envs)
    assert recorded["syncs"] == Counter()
    # ...while the step's single fetch does read the device (the spies work).
    assert len(recorded["fetches"]) >= 4


def test_streams_are_placed_per_device_with_one_wait_per_device() -> None:
    """Envs on two (pretend) GPUs: each stream is created on its env's device and waits on
    that device's current stream; no CUDA call is made."""

    class StubEnv:
        def __init__(self, device: torch.device) -> None:
            self.device = device
            self.calls: list[str] = []

        def apply_action(self, action: Any) -> None:
            self.calls.append("apply")

        def begin_epoch(self) -> None:
            self.calls.append("begin")

        def train_batches(self) -> Iterator[Any]:
            return iter(())

        def train_batch(self, batch: Any) -> None:
            raise AssertionError("no batches")

        def queue_measurements(self) -> list[Any]:
            self.calls.append("measure")
            return []

        def end_epoch(self, values: list[Any]) -> str:
            assert values == []
            self.calls.append("finish")
            return f"result on {self.device}"

    api = RecordingStreams()
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    executor = StreamsExecutor(StreamsOptions(), None, devices=devices, stream_api=api)
    envs = [StubEnv(d) for d in executor.env_devices(4)]
    results = executor.step(envs, [None] * 4)
    assert results == [f"result on {d}" for d in executor.env_devices(4)]
    assert [s.device for s in api.created] == [e.device for e in envs]
    waits = [(entry[1], entry[2].stream) for entry in api.log if entry[0] == "wait_event"]
    for stream in api.created:
        # before: the env stream waits on its own device's default stream; after: the reverse
        assert (stream, api.default(stream.device)) in waits
        assert (api.default(stream.device), stream) in waits
    assert all(env.calls == ["apply", "begin", "measure", "finish"] for env in envs)


# ---------------------------------------------------------------- CUDA (skipped without a GPU)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_streams_on_cuda_match_serial_on_cuda() -> None:
    gpu = torch.device("cuda", 0)
    config = make_config("run.n_envs=3", "run.device=cuda:0")
    serial_envs = make_envs(config, [gpu] * 3)
    stream_envs = make_envs(config, [gpu] * 3)
    serial = drive(SerialExecutor(None, executor_context(config)), serial_envs, epochs=3)
    streams = drive(
        StreamsExecutor(StreamsOptions(), executor_context(config)), stream_envs, epochs=3
    )
    for a_step, b_step in zip(serial, streams, strict=True):
        for a, b in zip(a_step, b_step, strict=True):
            assert a.metrics.batches == b.metrics.batches
            assert a.metrics.val_loss == pytest.approx(b.metrics.val_loss, rel=1e-4, abs=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_streams_over_two_gpus_keep_each_env_on_its_device() -> None:
    config = make_config("run.n_envs=4", 'run.devices=["cuda:0", "cuda:1"]')
    executor = StreamsExecutor(StreamsOptions(), executor_context(config))
    envs = make_envs(config, executor.env_devices(4))
    drive(executor, envs, epochs=2)
    for i, env in enumerate(envs):
        assert env.device == torch.device("cuda", i % 2)
        assert all(p.device == env.device for p in env.model.parameters())


def test_esper_run_with_streams_writes_the_serial_summary_and_checkpoint(tmp_path: Any) -> None:
    from esper_core.plugins import PluginManager
    from esper_core.run import api
    from esper_core.run.checkpoint import load_checkpoint
    from tests.plugins.esper_streams.helpers import FAKE_PLUGIN

    pm = PluginManager(extra=[FAKE_PLUGIN, "executors.streams"])
    base = [
        "run.task=tiny",
        "run.policy=scripted",
        "run.reward=acc_delta",
        "run.telemetry=[]",
        "run.n_envs=3",
    ]
    out = {}
    for executor in ("serial", "streams"):
        summary = api.run(
            make_config(*base, f"run.executor={executor}"),
            pm,
            run_dir=tmp_path / executor,
            quiet=True,
            notify=lambda _: None,
        )
        out[executor] = (
            {k: v for k, v in summary.items() if k not in ("wall_time", "run_name")},
            load_checkpoint(tmp_path / executor / "checkpoint.pt")["envs"],
        )
    assert out["serial"][0] == out["streams"][0]
    for a, b in zip(out["serial"][1], out["streams"][1], strict=True):
        assert a["model"].keys() == b["model"].keys()
        assert all(
            torch.equal(a["model"][k], b["model"][k])
            for k in a["model"]
            if isinstance(a["model"][k], torch.Tensor)
        )
