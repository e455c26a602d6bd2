"""The epoch's precision and compilation options, and its gradient statistics."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from esper_core.env.gradients import total_grad_norm
from esper_core.env.training import CompiledForward
from esper_core.errors import ConfigError
from esper_core.lifecycle.actions import WAIT
from tests.fakes import drive_to, make_env


def test_bf16_autocast_trains_on_cpu() -> None:
    env = make_env('training.amp="bf16"', "env.max_epochs=4")
    drive_to(env, "r0c0", "TRAINING")
    result = env.step(WAIT)
    assert math.isfinite(result.metrics.train_loss) and result.metrics.val_acc > 25.0
    assert env.trainer.amp_dtype == torch.bfloat16 and not env.trainer.scaler.is_enabled()


def test_fp16_on_a_cpu_is_a_config_error_saying_what_to_do() -> None:
    with pytest.raises(ConfigError) as info:
        make_env('training.amp="fp16"')
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("training.amp: fp16 needs a CUDA device, this env runs on cpu")
    assert "set training.amp to bf16 or off" in message


def test_each_env_has_its_own_grad_scaler() -> None:
    a, b = make_env(), make_env(env_index=1)
    assert a.trainer.scaler is not b.trainer.scaler


def test_compile_failure_is_logged_and_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_compile(model, mode):  # type: ignore[no-untyped-def]
        def compiled(x):  # type: ignore[no-untyped-def]
            raise RuntimeError("backend exploded (injected)")

        return compiled

    monkeypatch.setattr(torch, "compile", broken_compile)
    model = torch.nn.Linear(3, 2)
    forward = CompiledForward(model, "default")
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="esper.training"):
        out = forward(x)
    assert torch.equal(out, model(x))
    assert forward.fallback_reason == "RuntimeError: backend exploded (injected)"
    assert "training eagerly instead" in caplog.text and "backend exploded" in caplog.text
    assert torch.equal(forward(x), model(x))  # stays eager


def test_compile_mode_is_per_env_not_global() -> None:
    compiled = make_env('training.compile="default"')
    eager = make_env()
    assert compiled.trainer.forward.mode == "default" and eager.trainer.forward.mode == "off"
    assert eager.trainer.forward._compiled is None


def test_model_errors_are_not_hidden_by_the_fallback() -> None:
    forward = CompiledForward(torch.nn.Linear(3, 2), "off")
    with pytest.raises(RuntimeError):
        forward(torch.randn(4, 5))


def test_total_grad_norm_guards_empty_lists() -> None:
    assert total_grad_norm([]) is None
    p = torch.nn.Parameter(torch.ones(3))
    assert total_grad_norm([p]) is None
    p.grad = torch.full((3,), 2.0)
    assert total_grad_norm([p]) == pytest.approx(math.sqrt(12))


def test_seed_gradient_statistics_are_recorded_once_per_epoch() -> None:
    env = make_env()
    drive_to(env, "r0c0", "TRAINING", blueprint="res_random")
    env.step(WAIT)
    report = next(r for r in env.observation.slots if r.slot_id == "r0c0")
    assert report.gradient_health == pytest.approx(1.0)
    assert report.grad_ratio is not None and report.grad_ratio > 0


def _compiled_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def compile_raising(model, mode):  # type: ignore[no-untyped-def]
        def compiled(x):  # type: ignore[no-untyped-def]
            raise error

        return compiled

    monkeypatch.setattr(torch, "compile", compile_raising)


def test_out_of_memory_is_re_raised_unchanged_and_compile_stays_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    oom = torch.OutOfMemoryError("CUDA out of memory (injected)")
    _compiled_raising(monkeypatch, oom)
    forward = CompiledForward(torch.nn.Linear(3, 2), "default")
    with (
        caplog.at_level(logging.WARNING, logger="esper.training"),
        pytest.raises(torch.OutOfMemoryError) as info,
    ):
        forward(torch.randn(4, 3))
    assert info.value is oom
    assert forward.fallback_reason is None and forward._compiled is not None
    assert "training eagerly instead" not in caplog.text


def test_a_model_error_is_raised_as_the_model_raised_it_and_compile_stays_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The compiler wraps the model's error in its own; the eager call shows the real one.
    _compiled_raising(monkeypatch, RuntimeError("dynamo: failed while tracing (injected)"))
    forward = CompiledForward(torch.nn.Linear(3, 2), "default")
    with (
        caplog.at_level(logging.WARNING, logger="esper.training"),
        pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied") as info,
    ):
        forward(torch.randn(4, 5))  # a shape error of the model itself
    assert info.value.__context__ is None  # not raised while handling the compiler's error
    assert forward.fallback_reason is None and forward._compiled is not None
    assert "training eagerly instead" not in caplog.text
