"""``esper operators`` and ``esper operators check``: every first-party operator listed
with its sample host's sites and checked; a broken operator fails its check (exit 1),
an unknown one is one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SITELESS = '''
from esper_core import hookimpl
from esper_core.components.growth_operator import OperatorSample


class Siteless:
    """Says it grows nothing of its own sample host."""

    name, kind, description, needs = "siteless/width", "width", "grows nothing", "nothing"

    def sites(self, host):
        return ()

    def refusal(self, host):
        return None

    def problems(self, host, spec):
        return []

    def start(self, model, spec, **kwargs):
        raise AssertionError("never started: its host has no site")

    def sample(self):
        import torch
        from esper_core.components.growth_request import WidthGrowthSpec

        return OperatorSample(torch.nn.Linear(2, 2), torch.zeros(1, 2), WidthGrowthSpec(at=0.0))


@hookimpl
def esper_register_operators(register):
    register(Siteless())
'''


def test_the_first_party_operators_are_listed_with_their_sites(invoke: Any) -> None:
    result = invoke("operators", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert set(rows) == {
        "cnn/width",
        "transformer/width",
        "layers/width",
        "cnn/depth",
        "transformer/depth",
    }
    assert rows["cnn/width"]["sites"] == [
        {"name": "stage0", "size": 4},
        {"name": "stage1", "size": 8},
    ]
    assert rows["transformer/depth"]["sites"] == [{"name": "n_layer", "size": 2}]
    assert rows["layers/width"]["plugin"] == "operators.width"
    depth = invoke("operators", "--kind", "depth")
    assert depth.output.splitlines()[1:] == [
        "operators.depth",
        "  cnn/depth          depth  CNNHost  stage0_layers: 2, stage1_layers: 2",
        "  transformer/depth  depth  TransformerHost  n_layer: 2",
    ]


def test_every_first_party_operator_passes_its_check(invoke: Any) -> None:
    result = invoke("operators", "check", "--json")
    assert result.exit_code == 0, result.output
    checked = {r["name"]: r["problems"] for r in json.loads(result.output)}
    assert len(checked) == 5 and not any(checked.values()), checked


def test_an_operator_that_grows_nothing_fails_its_check(invoke: Any, tmp_path: Path) -> None:
    plugin = tmp_path / "siteless.py"
    plugin.write_text(SITELESS)
    result = invoke("operators", "check", "siteless/width", "--plugin", str(plugin))
    assert result.exit_code == 1
    assert result.output.startswith("FAIL siteless/width (plugin ")
    assert result.output.endswith(": its sample host (Linear) declares no site for it\n")


def test_an_unknown_operator_is_one_line(invoke: Any) -> None:
    result = invoke("operators", "check", "mlp/width")
    assert result.exit_code == 2
    assert "unknown growth operator 'mlp/width'; installed: cnn/depth, cnn/width" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
