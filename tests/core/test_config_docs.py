"""docs/configuration.md and `esper config show --all` come from the attrs field metadata."""

from __future__ import annotations

import tomllib
from pathlib import Path

import attrs

from esper_core.config import RunConfig, load_config
from esper_core.config_docs import reference_markdown, sections
from tests.plugin_set import FAKE_COMPONENTS, REPO


def test_the_configuration_reference_is_up_to_date() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == reference_markdown(), (
        "docs/configuration.md is stale: python -m esper_core.config_docs > docs/configuration.md"
    )


def test_the_reference_does_not_depend_on_whether_annotations_were_resolved() -> None:
    # cattrs resolves a class's string annotations the first time it structures one, so
    # which tests ran first in a process decided whether train.pairs read
    # list[TrainPair] or list[esper_core.config_train.TrainPair].
    from esper_core.config_train import TrainSection

    before = reference_markdown()
    attrs.resolve_types(TrainSection)
    assert not isinstance(attrs.fields(TrainSection).pairs.type, str)
    assert reference_markdown() == before
    assert "| list[TrainPair] |" in before


def test_every_core_key_is_documented_and_listed() -> None:
    text = reference_markdown()
    for name in sections():
        for field in attrs.fields(type(getattr(RunConfig(), name))):
            assert field.metadata.get("doc"), f"{name}.{field.name} has no description"
            assert f"| `{name}.{field.name}` |" in text
    assert {"run", "env", "training", "lifecycle", "governor", "train"} <= set(sections())


def test_config_show_all_lists_unset_keys_and_loads_back(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plain = invoke("config", "show", *FAKE_COMPONENTS)
    full = invoke("config", "show", "--all", *FAKE_COMPONENTS, "--set", "env.max_batches=7")
    assert plain.exit_code == 0 and full.exit_code == 0, full.output
    assert "max_epochs" not in plain.output  # unset keys are hidden without --all ...
    for key in ("max_epochs", "slots", "batch_size"):
        assert f"\n# {key} = (unset)\n" in full.output  # ... and listed with it
    assert "# Epochs per episode (task default). (default: unset)" in full.output
    assert "\nmax_batches = 7\n" in full.output
    assert "[tasks.tiny]" in full.output and "[rewards.acc_delta]" in full.output
    path = tmp_path / "all.toml"
    path.write_text(full.output)
    tomllib.loads(full.output)
    again = invoke("config", "show", "--plugin", FAKE_COMPONENTS[1], "--config", str(path))
    expected = invoke("config", "show", *FAKE_COMPONENTS, "--set", "env.max_batches=7")
    assert again.exit_code == 0 and again.output == expected.output


def test_the_reference_loads_as_the_defaults() -> None:
    """Each listed default is the field's real default (the text is generated, not typed)."""
    defaults = load_config()
    text = reference_markdown()
    assert "| `run.threads` | int | `1` |" in text and defaults.run.threads == 1
    assert "| `env.max_epochs` | int | `unset` |" in text and defaults.env.max_epochs is None
