"""A later attack replayed (cases named ``53 ...``): output directories that hold the
user's own files, and files handed over by someone else (a PPO checkpoint with its
digest recomputed, an edited events.jsonl), each an ``esper`` process against a fresh
directory."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plugin_set import FAKE_COMPONENTS
from tests.reliability.replay_case import Case, Check, Setup, esper_args, nothing_lost

TINY = [*FAKE_COMPONENTS, "--quiet", "--max-epochs", "2"]
USER = "user,data\n"


def _kept(directory: Path, names: tuple[str, ...]) -> Check:
    def check() -> str | None:
        changed = [n for n in names if (directory / n).read_text() != USER]
        return f"DATA LOST: {changed[0]} changed" if changed else None

    return check


def _run_into_project(*names: str) -> Setup:
    """``esper run --out PROJECT``, PROJECT holding the user's files called ``names``."""

    def setup(d: Path) -> tuple[list[str], Check]:
        project = d / "proj"
        project.mkdir()
        for name in names:
            (project / name).write_text(USER)
        args = [*TINY, "--set", 'run.telemetry=["jsonl", "csv"]', "--out", str(project)]
        return esper_args("run", *args), _kept(project, names)

    return setup


def _report_into(name: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        from tests.reliability.replay_cli import _esper

        run_dir, out = d / "r", d / "plots"
        _esper("run", *TINY, "--set", 'run.telemetry=["jsonl"]', "--out", str(run_dir))
        out.mkdir()
        (out / name).write_text(USER)
        return esper_args("report", str(run_dir), "--out", str(out)), _kept(out, (name,))

    return setup


def _compare_into(d: Path) -> tuple[list[str], Check]:
    project = d / "proj"
    project.mkdir()
    (project / "results.md").write_text(USER)
    args = ["compare", *FAKE_COMPONENTS, "--seeds", "2", "--out", str(project), "--dry-run"]
    return esper_args(*args), _kept(project, ("results.md",))


def _forged_ppo(forgery: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        from tests.reliability.test_forged_ppo_values import forged_checkpoint

        path = forged_checkpoint(d / "forged.pt", forgery)
        args = ["run", "--task", "digits", "--policy", f"ppo:{path}", "--quiet"]
        return esper_args(*args, "--max-epochs", "1", "--out", str(d / "r")), nothing_lost

    return setup


def _copied_checkpoint(d: Path) -> tuple[list[str], Check]:
    """A training run listed twice: once as itself, once as a byte copy elsewhere."""
    from tests.reliability.test_forged_ppo_values import forged_checkpoint

    first = forged_checkpoint(d / "a.pt", "nan-weight")  # any file: it is not loaded
    (d / "b.pt").write_bytes(first.read_bytes())
    (d / "exp.toml").write_text(
        f'seeds = 1\nout = "{d}/exp"\n[[policies]]\nname = "ppo"\n'
        f'checkpoints = ["{first}", "{d}/b.pt"]\n[[tasks]]\nname = "digits"\n'
    )
    return esper_args("compare", str(d / "exp.toml"), "--dry-run"), nothing_lost


def _events(edit: str) -> Setup:
    """``esper report`` of a run whose events.jsonl was edited: ``val_acc`` 1e300, or a
    growth plan (the first epoch's action) holding HTML and a heading."""

    def setup(d: Path) -> tuple[list[str], Check]:
        from tests.reliability.replay_cli import _esper

        run_dir = d / "r"
        _esper("run", *TINY, "--set", 'run.telemetry=["jsonl"]', "--out", str(run_dir))
        lines = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
        epoch = next(x for x in lines if x["kind"] == "epoch_completed")
        if edit == "val_acc":
            epoch["val_acc"] = 1e300
        else:
            epoch["reason"] = "x\n# Injected\n<script>alert(1)</script>"
        (run_dir / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

        def check() -> str | None:
            report = run_dir / "report.md"
            if edit != "val_acc" and report.is_file():
                text = report.read_text()
                if "<script>" in text or "\n# Injected" in text:
                    return "report.md carries the run's HTML or heading as markup"
            return None

        return esper_args("report", str(run_dir), "--dpi", "40"), check

    return setup


def _compare_toml(body: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        (d / "exp.toml").write_text(f'seeds = 1\nout = "{d}/exp"\n{body}\n')
        return esper_args("compare", str(d / "exp.toml"), "--dry-run"), nothing_lost

    return setup


def _dev_zero_corpus(d: Path) -> tuple[list[str], Check]:
    args = ["run", "--task", "charlm", "--policy", "wait", "--quiet", "--max-epochs", "1"]
    flags = ["--set", "tasks.charlm.path=/dev/zero", "--out", str(d / "r")]
    return esper_args(*args, *flags), nothing_lost


CASES = (
    Case(
        "53 run --out a project holding config.toml",
        _run_into_project("config.toml", "notes.txt"),
        says="would write over",
    ),
    Case(
        "53 run --out a project holding metrics.csv",
        _run_into_project("metrics.csv"),
        says="would write over",
    ),
    Case(
        "53 run --out a project holding events.jsonl",
        _run_into_project("events.jsonl"),
        says="would write over",
    ),
    Case("53 report --out over a user's report.md", _report_into("report.md"), says="written over"),
    Case("53 report --out over a user's figure", _report_into("accuracy.png"), says="written over"),
    Case("53 compare --out over a user's results.md", _compare_into, says="not a comparison's"),
    Case("53 ppo checkpoint: a NaN weight", _forged_ppo("nan-weight"), says="is not finite"),
    Case("53 ppo checkpoint: 1e30 weights", _forged_ppo("absurd-weights"), says="past 10000"),
    Case("53 ppo checkpoint: NaN normaliser mean", _forged_ppo("nan-mean"), says="not finite"),
    Case("53 ppo checkpoint: negative variance", _forged_ppo("negative-var"), says="is negative"),
    Case(
        "53 compare checkpoints: a byte copy at another path",
        _copied_checkpoint,
        says="same training run",
    ),
    Case("53 report: val_acc 1e300", _events("val_acc"), says="a percentage in [0, 100]"),
    Case("53 report: HTML and a heading in the run's text", _events("markup"), code=0),
    Case(
        "53 compare: a derived baseline named twice",
        _compare_toml(
            'baselines = ["static-final", "static-final"]\npolicies = ["heuristic"]\n'
            '[[tasks]]\nname = "digits"'
        ),
        says="named twice",
    ),
    Case("53 charlm corpus /dev/zero", _dev_zero_corpus, says="not a regular file"),
)
