"""The run summary on a narrow terminal: names wrap, nothing is cut off."""

from __future__ import annotations

import io

from rich.console import Console

from esper_cli.display import print_summary

EPISODE = {
    "env": 0,
    "episode": 0,
    "seed": 12345,
    "final_test_acc": 91.25,
    "final_val_acc": 90.5,
    "params_added": 18560,
    "params_unblended": 4242,
    "seeds_fossilized": 1,
    "seeds_pruned": 0,
    "rollbacks": 0,
    "total_reward": 1.5,
}
SEED = {
    "env": 0,
    "episode": 0,
    "seed_id": "env0-ep0-r0c0-s1",
    "blueprint": "cnn/a_rather_long_third_party_blueprint_name",
    "germinated_epoch": 5,
    "ended_epoch": 21,
    "fate": "fossilized",
    "contribution": 12.5,
}
SUMMARY = {
    "mode": "run",
    "task": "digits",
    "policy": "heuristic",
    "reward": "pbrs",
    "status": "completed",
    "wall_time": 8.5,
    "episodes": [EPISODE],
    "seeds": [SEED],
    "final_test_acc_mean": 91.25,
    "params_added_mean": 18560.0,
    "host_params": 682,
}


def _column(text: str, title: str, index: int) -> str:
    """The cells of one column of the table titled ``title``, joined across folded lines."""
    block = text[text.index(title) :]
    rows = [line for line in block.splitlines() if line.startswith("│")]
    return "".join(line.split("│")[index + 1].strip() for line in rows)


def test_an_80_column_terminal_wraps_names_instead_of_truncating() -> None:
    out = io.StringIO()
    print_summary(SUMMARY, "runs/x", Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    assert "…" not in text
    assert _column(text, "Seeds", 2) == "env0-ep0-r0c0-s1"
    assert _column(text, "Seeds", 3) == "a_rather_long_third_party_blueprint_name"
    assert "never reached the output hold 4,242 parameters" in text


def test_the_summary_shows_the_test_loss_and_a_language_models_perplexity() -> None:
    def shown(summary: dict) -> str:  # type: ignore[type-arg]
        out = io.StringIO()
        print_summary(summary, "runs/x", Console(file=out, width=120, color_system=None))
        return out.getvalue()

    loss = {"final_test_loss_mean": 1.25, "final_test_perplexity_mean": 3.4903}
    classifier = shown({**SUMMARY, **loss})
    assert "final test loss (mean): 1.2500" in classifier and "perplexity" not in classifier
    lm = shown({**SUMMARY, **loss, "task": "charlm", "language_model": True})
    assert "final test loss (mean): 1.2500, perplexity 3.490" in lm
    assert "final test loss" not in shown(SUMMARY)  # a summary written before the loss was
