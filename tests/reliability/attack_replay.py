"""The reliability attack replayed as a user runs it: each case a real process.

``python -m tests.reliability.attack_replay [WORD ...]`` (from the repository root) runs
every case (or those whose name holds a WORD) and prints one row each, then the tally by
verdict; it exits 1 if any case is not clean. The cases: every numbered reproducer of
the attack (``replay_cli.py``), every case of its attack on the new surfaces (named
``6 ...``), and the cases of the attack on the surfaces added since (named ``N ...``), on
the command line (``replay_cli.py``) and through the library (``replay_library.py``); the
cases of a later attack (named ``53 ...``: output directories holding the user's files,
handed-over checkpoints and events files) are in ``replay_handed_files.py``.

A verdict is one of: clean (the expected exit code, no traceback, exactly one ``error:``
line on stderr, or one ``FAIL`` line from ``esper blueprints check``, holding the
expected phrase; or, for a case that must work, exit 0 and the right result), traceback,
hang (past ``TIMEOUT``), silent acceptance (exit 0 on input that cannot be meant, or the
wrong result), data loss (a file outside the run directory changed) or unclear (an error,
but not one line, or not the expected one). The pytest suite pins each case on its own.
"""

from __future__ import annotations

import sys
from collections import Counter

from tests.reliability.replay_case import VERDICTS, Case, replay
from tests.reliability.replay_cli import CASES as CLI_CASES
from tests.reliability.replay_handed_files import CASES as HANDED_FILES_CASES
from tests.reliability.replay_library import CASES as LIBRARY_CASES
from tests.reliability.replay_own_model import CASES as OWN_MODEL_CASES

CASES: tuple[Case, ...] = (*CLI_CASES, *LIBRARY_CASES, *HANDED_FILES_CASES, *OWN_MODEL_CASES)


def main(words: list[str]) -> int:
    chosen = [c for c in CASES if not words or any(w in c.name for w in words)]
    print("| case | outcome | s | what it said |\n|---|---|---|---|", flush=True)
    tally: Counter[str] = Counter()
    for case in chosen:
        outcome = replay(case)
        tally[outcome.verdict] += 1
        print(outcome.row(), flush=True)
    print("\n" + ", ".join(f"{tally[v]} {v}" for v in VERDICTS) + f" (of {len(chosen)})")
    return 0 if tally["clean"] == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
