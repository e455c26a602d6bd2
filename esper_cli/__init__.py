"""The ``esper`` command line: click commands only; the logic lives in esper_core."""
