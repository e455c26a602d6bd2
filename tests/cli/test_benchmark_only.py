"""``esper benchmark --only``: a subset of the suite's policies and candidates (wait and
the oracle always run), and a label the suite does not have is a usage error."""

from __future__ import annotations

from pathlib import Path

from tests.plugin_set import REPO

SUITE = str(REPO / "examples" / "suites" / "controller-suite.toml")


def test_only_narrows_the_evaluation_to_the_labels_named(invoke, tmp_path: Path) -> None:
    args = [SUITE, "--split", "training", "--dry-run", "--out", str(tmp_path)]
    everything = invoke("benchmark", *args)
    narrowed = invoke("benchmark", *args, "--only", "heuristic", "--only", "slowdown-early")
    assert everything.exit_code == 0 and narrowed.exit_code == 0, narrowed.output
    # 14 training pairs x 10 seeds x (wait, the oracle, then the policies kept): 101 / 4 arms
    assert "at most 14140 evaluation runs" in everything.output
    assert "at most 560 evaluation runs" in narrowed.output


def test_only_with_a_label_the_suite_lacks_names_the_labels_it_has(invoke) -> None:
    done = invoke("benchmark", SUITE, "--dry-run", "--only", "heuristc")
    assert done.exit_code == 2
    assert "--only heuristc: not a policy or candidate of the suite" in done.output
    assert "heuristic-slowdown" in done.output


def test_zero_seeds_or_jobs_are_refused_in_one_line(invoke) -> None:
    """``--seeds 0`` once reached the menu probe and ended in an IndexError traceback."""
    for flag in ("--seeds", "--jobs"):
        done = invoke("benchmark", SUITE, "--dry-run", flag, "0")
        assert done.exit_code == 2, done.output
        assert f"Invalid value for '{flag}'" in done.output and "Traceback" not in done.output
