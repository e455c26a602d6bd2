"""A warm interpreter that forks one process per mutant of the mutation check.

Each mutant needs a fresh interpreter that imports its package from the mutated copy,
but starting one costs more than most mutants' tests: importing torch, the compiler
front end its optimizers pull in on first use, and the test tooling took about 11 s of
CPU a mutant, times 70 mutants. The zygote imports only third-party modules, never a
package a mutation copies (``esper_*``), and forks a child per mutant: the child imports
the mutant's package and everything of Esper's afresh, as a new interpreter would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from attrs import define, field

from tests.plugin_set import REPO, subprocess_env

# What every mutant's tests import and no mutation touches.
PRELOADED = ("attrs", "cattrs", "click", "numpy", "pytest", "hypothesis", "torch", "torch._dynamo")

_ZYGOTE = """
import importlib, json, os, signal, sys, time, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
assert not [m for m in sys.modules if m.startswith("esper")], "the zygote imported Esper"
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            root, module = request["root"], request["module"]
            sys.path.insert(0, root)
            loaded = importlib.import_module(module)
            if not loaded.__file__.startswith(root):
                print(f"MUTATION NOT LOADED: {module} came from {loaded.__file__}", file=sys.stderr)
            else:
                import pytest
                code = int(pytest.main(request["args"]))
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    # The deadline is kept here: pytest-timeout takes SIGALRM over in the child.
    deadline = time.monotonic() + request["timeout"]
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            done = os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    print(json.dumps(os.waitstatus_to_exitcode(done[1])), flush=True)
"""


@define
class Forker:
    """The zygote process; :meth:`run` a mutant's tests in a child of it."""

    _proc: subprocess.Popen[str] | None = field(default=None, init=False)

    def _zygote(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _ZYGOTE, *PRELOADED],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
                env={**subprocess_env(), "PYTHONDONTWRITEBYTECODE": "1"},
            )
        return self._proc

    def run(self, root: Path, module: str, args: list[str], timeout: int) -> tuple[int, str]:
        """pytest's exit code and output for ``args``, with ``root`` first on the path and
        ``module`` imported from it (a negative code: the signal that ended the child)."""
        proc = self._zygote()
        assert proc.stdin is not None and proc.stdout is not None
        with tempfile.TemporaryDirectory(prefix="esper-mutant-log-") as tmp:
            log = Path(tmp) / "output.txt"
            request = {
                "root": str(root),
                "module": module,
                "args": args,
                "timeout": timeout,
                "log": str(log),
            }
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"the mutation zygote died (exit code {proc.wait()})")
            output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return int(json.loads(reply)), output

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
            self._proc = None
