"""Files a run writes get the modes the user's umask asks for."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.mark.parametrize("umask", [0o077, 0o027, 0o022, 0o002])
def test_the_atomic_writer_respects_the_umask(tmp_path: Path, umask: int) -> None:
    # In a child process: the umask belongs to the whole process.
    script = textwrap.dedent(f"""
        import os
        os.umask({umask:#o})
        from esper_core.run.checkpoint import write_text
        write_text({str(tmp_path / "f.txt")!r}, "x")
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    mode = stat.S_IMODE(os.stat(tmp_path / "f.txt").st_mode)
    assert mode == 0o666 & ~umask, oct(mode)


@pytest.mark.parametrize("label", ["ok\n", "ok\r", "a/b", ".hidden"])
def test_a_compare_label_is_a_whole_plain_name(label: str) -> None:
    """A label names cell directories: a trailing newline used to pass the check."""
    from esper_core.compare.experiment import build_experiment, parse_experiment, shared_config
    from esper_core.errors import ConfigError

    # Refused when the entry is read (every list entry's fields are checked) or, at the
    # latest, when the experiment is built.
    with pytest.raises(ConfigError) as info:
        spec = parse_experiment({"policies": [{"name": "wait", "label": label}]})
        build_experiment(spec, shared_config(spec))
    assert "label" in str(info.value) and "\n" not in str(info.value)
