"""The attack's command-line cases (its reproducers 1 to 14 and the new surfaces),
each set up the way the attack ran it: an ``esper`` process against a fresh directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.plugin_set import FAKE_COMPONENTS, FAKE_PLUGIN, REPO, subprocess_env
from tests.reliability.hostile_plugins import hostile_blueprint, hostile_reward
from tests.reliability.replay_case import Case, Check, Setup, esper_args, nothing_lost

TINY = [*FAKE_COMPONENTS, "--quiet", "--set", "run.telemetry=[]"]
OWN = "tests.plugins.esper_tasks.own_data"
DATASET = [
    "run", "--task", "dataset", "--quiet", "--max-epochs", "1",
    "--set", f"tasks.dataset.model={OWN}:small_cnn",
    "--set", 'tasks.dataset.slots=["0"]',
    "--set", "run.telemetry=[]",
]  # fmt: skip


def _esper(*args: str) -> None:
    """A command the case needs done first (a finished run to resume, say)."""
    done = subprocess.run(
        [sys.executable, "-m", "esper_cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=subprocess_env(autoload=True),
    )
    if done.returncode != 0:
        raise RuntimeError(f"setup failed: esper {' '.join(args)}: {done.stderr[-2000:]}")


def _cli(*args: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        return esper_args(*(a.replace("{d}", str(d)) for a in args)), nothing_lost

    return setup


def _intact(victim: Path, content: str) -> Check:
    def check() -> str | None:
        if victim.is_symlink() or not victim.is_file() or victim.read_text() != content:
            return f"DATA LOST: {victim.name} changed"
        return None

    return check


def _lock_link(resume: bool) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        run_dir, victim = d / "r", d / "victim.txt"
        victim.write_text("precious\n")
        if resume:
            _esper("run", *TINY, "--max-epochs", "2", "--out", str(run_dir))
            (run_dir / ".esper.lock").unlink()
        else:
            run_dir.mkdir()
        (run_dir / ".esper.lock").symlink_to(victim)
        if resume:
            args = ["run", "--plugin", FAKE_PLUGIN, "--resume", str(run_dir), "--episodes", "2"]
        else:
            args = ["run", *TINY, "--max-epochs", "1", "--out", str(run_dir)]
        return esper_args(*args), _intact(victim, "precious\n")

    return setup


def _experiment(body: str, dry_run: bool = True) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        config = d / "exp.toml"
        config.write_text(
            f'seeds = 1\nbaselines = ["size-sweep"]\npolicies = ["wait"]\nout = "{d}/a/b/exp"\n'
            f'[[tasks]]\nname = "digits"\noptions = {{ preset = "small" }}\n{body}'
        )

        def check() -> str | None:
            outside = [p for p in (d / "victimexp", d / "a" / "victimexp") if p.exists()]
            return f"DATA LOST: wrote {outside[0]}" if outside else None

        return esper_args("compare", str(config), *(["--dry-run"] if dry_run else [])), check

    return setup


def _sweep(*sizes: str) -> str:
    return "".join(f"[[sweep.sizes]]\n{size}\n" for size in sizes)


def _compare_toml(body: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        config = d / "exp.toml"
        # Top-level keys and tables before [[tasks]], which would take them as its own.
        config.write_text(f'seeds = 1\nout = "{d}/exp"\n{body}\n[[tasks]]\nname = "digits"\n')
        return esper_args("compare", str(config), "--dry-run"), nothing_lost

    return setup


def _resume_edited(d: Path) -> tuple[list[str], Check]:
    run_dir = d / "r"
    _esper(*DATASET, "--set", f"tasks.dataset.data={OWN}:splits", "--out", str(run_dir))
    config = run_dir / "config.toml"
    config.write_text(config.read_text().replace(f'"{OWN}:small_cnn"', '"os:abort"'))
    return esper_args("run", "--resume", str(run_dir), "--episodes", "2"), nothing_lost


def _forged(key: str, value: object) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        from esper_core.run.checkpoint import load_checkpoint, save_checkpoint

        run_dir = d / "r"
        _esper("run", *TINY, "--max-epochs", "2", "--out", str(run_dir))
        data = load_checkpoint(run_dir / "checkpoint.pt")
        data.pop("format")
        data[key] = value
        save_checkpoint(run_dir / "checkpoint.pt", data)  # with a digest that matches again
        args = ["run", "--plugin", FAKE_PLUGIN, "--resume", str(run_dir), "--episodes", "2"]
        return esper_args(*args), nothing_lost

    return setup


def _reward(body: str, *extra: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        plugin = hostile_reward(d / "hostile_reward.py", body.replace("{d}", str(d)))
        args = ["run", *TINY, "--plugin", plugin, "--reward", "hostile", "--max-epochs", "6"]
        return esper_args(*args, *extra, "--out", str(d / "r")), nothing_lost

    return setup


def _blueprint(check: bool, **options: object) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        plugin = hostile_blueprint(d / "hostile_blueprint.py", **options)  # type: ignore[arg-type]
        if check:
            return esper_args(
                "blueprints", "check", "aaa_hostile", "--plugin", plugin
            ), nothing_lost
        args = ["run", *TINY, "--plugin", plugin, "--policy", "germinate_first", "--max-epochs"]
        return esper_args(*args, "4", "--out", str(d / "r")), nothing_lost

    return setup


def _report_while_held(d: Path) -> tuple[list[str], Check]:
    run_dir = d / "r"
    _esper("run", *FAKE_COMPONENTS, "--quiet", "--max-epochs", "2", "--out", str(run_dir))
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys; from pathlib import Path; from esper_core.run.lock import RunDirLock; "
            "RunDirLock.acquire(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()",
            str(run_dir),
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    before = sorted(p.name for p in run_dir.iterdir())

    def check() -> str | None:
        holder.communicate("", timeout=60)
        after = sorted(p.name for p in run_dir.iterdir())
        return None if after == before else f"DATA LOST: wrote {set(after) - set(before)}"

    return esper_args("report", str(run_dir), "--dpi", "40"), check


def _corpus(content: bytes, code: int = 2) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        corpus = d / "corpus.txt"
        corpus.write_bytes(content)
        sets = [
            f"tasks.charlm.path={corpus}", "run.telemetry=[]", "tasks.charlm.preset=impaired",
            "tasks.charlm.block_size=8", "tasks.charlm.max_chars=4000", "env.batch_size=16",
        ]  # fmt: skip
        args = ["run", "--task", "charlm", "--policy", "wait", "--quiet", "--max-epochs", "1"]
        flags = [x for s in sets for x in ("--set", s)]
        return esper_args(*args, *flags, "--out", str(d / "r")), _finished(d / "r", code)

    return setup


def _finished(run_dir: Path, code: int) -> Check:
    def check() -> str | None:
        if code == 0 and not (run_dir / "summary.json").is_file():
            return "the run wrote no summary"
        return None

    return check


def _dataset(data: str, *sets: str) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        flags = [x for s in (f"tasks.dataset.data={data}", *sets) for x in ("--set", s)]
        return esper_args(*DATASET, *flags, "--out", str(d / "r")), nothing_lost

    return setup


def _image_folder(bad: bytes | None, classes: dict[str, tuple[str, ...]] | None = None) -> Setup:
    def setup(d: Path) -> tuple[list[str], Check]:
        from PIL import Image

        root = d / "images"
        for split, labels in (classes or {s: ("a", "b") for s in ("train", "val", "test")}).items():
            for label in labels:
                (root / split / label).mkdir(parents=True)
                for i in range(2):
                    Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(root / split / label / f"{i}.png")
        if bad is not None:
            (root / "train" / "b" / "broken.png").write_bytes(bad)
        sets = [f"tasks.dataset.image_folder={root}", "tasks.dataset.image_size=8"]
        flags = [x for s in sets for x in ("--set", s)]
        return esper_args(*DATASET, *flags, "--out", str(d / "r")), nothing_lost

    return setup


def _nul_out_dir(d: Path) -> tuple[list[str], Check]:
    (d / "c.toml").write_text('[run]\nout_dir = "\\u0000"\n')
    return esper_args("run", *TINY, "--config", str(d / "c.toml")), nothing_lost


SPIN = "import os\nwhile os.path.exists({hang!r}):\n    pass\nreturn super().compute(ctx)"


def _spinning_reward(d: Path) -> tuple[list[str], Check]:
    hang = d / "hang"
    hang.touch()
    started = time.monotonic()
    setup = _reward(SPIN.format(hang=str(hang)), "--set", "run.epoch_timeout=2")
    args, _ = setup(d)

    def check() -> str | None:
        hang.unlink(missing_ok=True)
        return None if time.monotonic() - started < 200 else "stopped too late"

    return args, check


def _training_runs(second: str) -> Setup:
    """A method of two "training runs" whose second names the first again (``{a}``: the
    first's run directory; ``{copy}``: a copy of it)."""

    def setup(d: Path) -> tuple[list[str], Check]:
        for run in ("a", "copy"):
            (d / run).mkdir()
            (d / run / "checkpoint.pt").write_bytes(b"one training run")
        first = d / "a" / "checkpoint.pt"
        runs = f'["{first}", "{second.format(a=d / "a", copy=d / "copy")}"]'
        (d / "exp.toml").write_text(
            f'seeds = 1\nout = "{d}/exp"\n[[policies]]\nname = "ppo"\ncheckpoints = {runs}\n'
            '[[tasks]]\nname = "digits"\n'
        )
        return esper_args("compare", str(d / "exp.toml"), "--dry-run"), nothing_lost

    return setup


def _forged_cell(wall_time: str) -> Setup:
    """An experiment directory holding one finished cell whose summary says ``wall_time``."""

    def setup(d: Path) -> tuple[list[str], Check]:
        cell = d / "exp" / "cells" / "tiny" / "scripted" / "seed-0"
        cell.mkdir(parents=True)
        (cell / "summary.json").write_text(
            '{"status": "completed", "final_test_acc_mean": 50.0, "wall_time": ' + wall_time + "}"
        )
        args = ["compare", *FAKE_COMPONENTS, "--seeds", "2", "--out", str(d / "exp")]
        return esper_args(*args, "--dry-run"), nothing_lost

    return setup


STATIC = [
    "run", "--policy", "static", "--quiet", "--max-epochs", "4",
    "--set", "run.telemetry=[]", "--out", "{d}/r",
]  # fmt: skip

HUGE_LINE = ("the quick brown fox jumps over the lazy dog " * 120_000).encode()  # 5.4 MB, no \n

CASES = (
    # ---- Reproducers 1-14.
    Case("1 lock file a link out of the run directory", _lock_link(False), says="outside"),
    Case("1 lock file a link, on --resume", _lock_link(True), says="outside"),
    Case(
        "2 sweep label ../../victimexp (--dry-run)",
        _experiment(_sweep('label = "../../../../../../victimexp"')),
        says="label",
    ),
    Case(
        "2 sweep label ../../victimexp (a real compare)",
        _experiment(_sweep('label = "../../../../../../victimexp"'), dry_run=False),
        says="label",
    ),
    Case("2 sweep label a/b", _experiment(_sweep('label = "a/b"')), says="label"),
    Case("2 sweep label with a newline", _experiment(_sweep('label = "a\\nb"')), says="label"),
    Case(
        "3 --resume of a config.toml edited to name os:abort", _resume_edited, says="config changed"
    ),
    Case("4 sys.exit(0) in a reward", _reward("sys.exit(0)"), says="sys.exit(0)"),
    Case(
        "4 sys.exit(0) in a blueprint's forward (run)",
        _blueprint(False, forward="if self.training:\n    sys.exit(0)\nreturn x + self.conv(x)"),
        says="sys.exit(0)",
    ),
    Case(
        "4 sys.exit(0) in a blueprint's forward (blueprints check)",
        _blueprint(True, forward="sys.exit(0)"),
        code=1,
        says="sys.exit(0)",
    ),
    Case("5 NaN reward", _reward("return RewardBreakdown.of(delta=math.nan)"), says="non-finite"),
    Case("6 checkpoint forged: epoch 10**9", _forged("epoch", 10**9), says="epoch = 1000000000"),
    Case(
        "6 checkpoint forged: elapsed NaN", _forged("elapsed", float("nan")), says="elapsed = nan"
    ),
    Case(
        "7 --resamples 1e11 (--dry-run)",
        _cli("compare", "examples/compare-digits.toml", "--dry-run", "--resamples", "100000000000"),
        says="resamples",
    ),
    Case(
        "7 --jobs 100000 (--dry-run)",
        _cli("compare", "examples/compare-digits.toml", "--dry-run", "--jobs", "100000"),
        says="jobs",
    ),
    Case(
        "7 jobs = 100000 in the file (--dry-run)",
        _compare_toml('policies = ["wait"]\njobs = 100000'),
        says="jobs",
    ),
    Case(
        "7 [[policies]] with a label and no name",
        _compare_toml('[[policies]]\nlabel = "mine"'),
        says="name",
    ),
    Case(
        "8 rewards.pbrs.epoch_bonus=1e20",
        _cli("config", "show", "--set", "rewards.pbrs.epoch_bonus=1e20"),
        says="epoch_bonus",
    ),
    Case(
        "8 policies.heuristic.gain_per_doubling=1e20",
        _cli("config", "show", "--set", "policies.heuristic.gain_per_doubling=1e20"),
        says="gain_per_doubling",
    ),
    Case(
        "8 env.blueprints=''",
        _cli("config", "show", "--set", "env.blueprints=''"),
        says="at least one",
    ),
    Case(
        "8 lifecycle.styles=''",
        _cli("config", "show", "--set", "lifecycle.styles=''"),
        says="at least one",
    ),
    Case(
        "9 float64 blueprint in a run",
        _blueprint(False, build="return Seed(channels).double()"),
        says="float64",
    ),
    Case(
        "9 float64 blueprint (blueprints check)",
        _blueprint(True, build="return Seed(channels).double()", identity=False),
        code=1,
        says="float64",
    ),
    Case(
        "10 full disk before the first checkpoint",
        _cli("run", *TINY, "--max-epochs", "2", "--out", "{d}/r"),
        says="start the run again",
        file_limit=6000,
    ),
    Case("11 esper report on a run another process holds", _report_while_held, says="in use"),
    Case("12 str reward", _reward('return "1.0"'), says="returned a str"),
    Case(
        "12 float64 blueprint, identity_at_birth (blueprints check)",
        _blueprint(True, build="return Seed(channels).double()"),
        code=1,
        says="float64",
    ),
    Case("13 run.out_dir NUL in a TOML file", _nul_out_dir, says="NUL"),
    Case("13 checkpoint forged: epoch -5", _forged("epoch", -5), says="epoch = -5"),
    Case(
        "14 a reward that never returns (run.epoch_timeout=2)",
        _spinning_reward,
        says="epoch_timeout",
    ),
    Case(
        "14 --seeds 100000000 (--dry-run)",
        _cli("compare", "examples/compare-digits.toml", "--dry-run", "--seeds", "100000000"),
        says="seeds",
    ),
    # ---- The new surfaces.
    Case(
        "6 tasks.dataset: a module that does not import",
        _dataset("no_such_package.mod:splits"),
        says="cannot import",
    ),
    Case(
        "6 tasks.dataset: data returning strings", _dataset(f"{OWN}:strings"), says="not a tensor"
    ),
    Case("6 tasks.dataset: float targets", _dataset(f"{OWN}:float_targets"), says="class index"),
    Case(
        "6 tasks.dataset: splits of different shapes",
        _dataset(f"{OWN}:mixed_shapes"),
        says="differ in shape",
    ),
    Case(
        "6 tasks.dataset: a model with 1-D output",
        _dataset(f"{OWN}:splits", f"tasks.dataset.model={OWN}:scalar_cnn"),
        says="[batch, classes]",
    ),
    Case(
        "6 tasks.dataset: a label past the outputs",
        _dataset(f"{OWN}:label_past_the_outputs"),
        says="labels must lie",
    ),
    Case("6 image folder: an empty image", _image_folder(b""), says="broken.png"),
    Case(
        "6 image folder: a corrupt image", _image_folder(b"\x89PNG not really"), says="broken.png"
    ),
    Case(
        "6 image folder: splits with different classes",
        _image_folder(None, {"train": ("a", "b", "c"), "val": ("a", "c"), "test": ("a", "b", "c")}),
        says="different class folders",
    ),
    Case(
        "6 glyphs convs_per_block=100000",
        _cli("config", "show", "--task", "glyphs", "--set", "tasks.glyphs.convs_per_block=100000"),
        says="convs_per_block",
    ),
    Case(
        "6 glyphs convs_per_block=1024",
        _cli("config", "show", "--task", "glyphs", "--set", "tasks.glyphs.convs_per_block=1024"),
        says="convs_per_block",
    ),
    Case(
        "6 glyphs noise=1e300",
        _cli("config", "show", "--task", "glyphs", "--set", "tasks.glyphs.noise=1e300"),
        says="noise",
    ),
    Case(
        "6 glyphs noise=1000",
        _cli("config", "show", "--task", "glyphs", "--set", "tasks.glyphs.noise=1000"),
        says="noise",
    ),
    Case(
        "6 glyphs base_channels=1024, n_blocks=4",
        _cli(
            "config",
            "show",
            "--task",
            "glyphs",
            "--set",
            "tasks.glyphs.base_channels=1024",
            "--set",
            "tasks.glyphs.n_blocks=4",
        ),
        says="conv weights",
    ),
    Case("6 [[sweep.sizes]] none", _experiment("[sweep]\nsizes = []\n"), says="sweep"),
    Case("6 [[sweep.sizes]] empty label", _experiment(_sweep('label = ""')), says="label"),
    Case(
        "6 [[sweep.sizes]] duplicate labels",
        _experiment(_sweep('label = "a"', 'label = "a"')),
        says="label",
    ),
    Case(
        "6 [[sweep.sizes]] unknown key", _experiment(_sweep('label = "a"\nwidth = 3')), says="width"
    ),
    Case("6 charlm: empty corpus", _corpus(b""), says="is empty"),
    Case("6 charlm: binary corpus", _corpus(bytes(range(256)) * 40), says="binary"),
    Case("6 charlm: one character", _corpus(b"a" * 6000), says="one distinct character"),
    Case("6 charlm: one huge line (trains)", _corpus(HUGE_LINE, code=0), code=0),
    # ---- Newer surfaces (RELIABILITY.md, "the newer surfaces").
    Case(
        "N run.telemetry a string, not a list",
        _cli("config", "show", "--set", 'run.telemetry="jsonl"'),
        says="expected a list",
    ),
    Case(
        "N policies.static.seeds a string, not a list",
        _cli("config", "show", "--policy", "static", "--set", 'policies.static.seeds="a@r0c0"'),
        says="expected a list",
    ),
    Case(
        "N policies.static.widen_at due after the last epoch",
        _cli(*STATIC, "--set", "policies.static.widen_at=0.9"),
        says="after the run's last epoch",
    ),
    Case(
        "N policies.static.widen_factor=1.01 (adds no channel)",
        _cli(
            *STATIC,
            "--set",
            "policies.static.widen_at=0.5",
            "--set",
            "policies.static.widen_factor=1.01",
        ),
        says="nothing to widen",
    ),
    Case(
        "N policies.static.widen_factor=8 of a 4.7M-weight host",
        _cli(
            *STATIC,
            "--set",
            "policies.static.widen_at=0.5",
            "--set",
            "policies.static.widen_factor=8",
            "--set",
            "tasks.digits.base_channels=512",
            "--set",
            "tasks.digits.n_blocks=2",
        ),
        says="the widened host would hold",
    ),
    Case(
        "N policies.static.widen_stages=[0,0]",
        _cli("config", "show", "--policy", "static", "--set", "policies.static.widen_stages=[0,0]"),
        says="named twice",
    ),
    Case(
        "N policies.schedule.at=1 (grows nothing)",
        _cli(
            "run",
            "--policy",
            "schedule",
            "--quiet",
            "--max-epochs",
            "4",
            "--out",
            "{d}/r",
            "--set",
            "run.telemetry=[]",
            "--set",
            'policies.schedule.seeds=["conv_heavy@r0c0"]',
            "--set",
            "policies.schedule.at=1",
        ),
        says="after the run's last epoch",
    ),
    Case(
        "N compare checkpoints: a NUL in a path",
        _training_runs("a\\u0000b"),
        says="without NUL bytes",
    ),
    Case(
        "N compare checkpoints: a run's directory and its checkpoint.pt",
        _training_runs("{a}"),
        says="same training run",
    ),
    Case(
        "N compare checkpoints: DIR/./checkpoint.pt",
        _training_runs("{a}/./checkpoint.pt"),
        says="same training run",
    ),
    Case(
        "N compare checkpoints: a copied run directory",
        _training_runs("{copy}/checkpoint.pt"),
        says="same training run",
    ),
    Case("N compare --dry-run: a cell's wall_time NaN", _forged_cell("NaN"), says="is damaged"),
    Case("N compare --dry-run: a cell's wall_time -5", _forged_cell("-5"), says="is damaged"),
)
