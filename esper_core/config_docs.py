"""The configuration described from the attrs field metadata, the one source of truth.

:func:`reference_markdown` is ``docs/configuration.md`` (a test fails when the file is
stale; regenerate it with ``python -m esper_core.config_docs > docs/configuration.md``).
:func:`annotated_toml` is ``esper config show --all``: every key with its value, its
default and its description, unset keys commented out, so the text still loads as a
config file.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from esper_core.config import COMPONENT_KINDS, MAX_THREADS, RunConfig
from esper_core.config_limits import BOUNDS
from esper_core.converter import Each, Range, unstructure

TITLE = "# Configuration reference"
INTRO = """\
<!-- Generated from the attrs field metadata of esper_core/config.py by
     `python -m esper_core.config_docs > docs/configuration.md`; tests/core/test_config_docs.py
     fails when this file is stale. Do not edit by hand. -->

Every `esper` command that starts or resolves a run reads one configuration: a TOML or
JSON file (`--config FILE`), then the convenience flags (`--task`, `--seed`, ...), then
`--set section.key=value` overrides (values are TOML: `--set 'env.slots=["r0c0"]'`).
`esper config show` prints the resolved configuration; `esper config show --all` prints
every key below with its default and description, unset keys commented out.

A default of *unset* means the value comes from elsewhere, named in the description
(usually the task). Components bring their own option tables (`[tasks.digits]`,
`[rewards.pbrs]`, `[policies.ppo]`, `[telemetry.console]`, `[executors.serial]`): each
plugin's README lists them, and `esper config show --all` prints those of the selected
components.
"""


def _toml_value(value: Any) -> str:
    """One line of TOML (tomli_w spreads arrays over lines)."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    import tomli_w

    return tomli_w.dumps({"v": value}).strip()[len("v = ") :]


def _allowed(field: attrs.Attribute) -> str:
    check = field.metadata.get("check")
    if isinstance(check, Range) and check.hi == MAX_THREADS and field.name == "threads":
        return "an integer in [0, 4 x usable CPUs], at most 1024"  # the bound is the machine's
    if isinstance(check, Each):
        inner = check.inner
        return f"each {inner.expected}" if isinstance(inner, Range) else ""
    return check.expected if isinstance(check, Range) else ""


_DOTTED = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)")


def _type_name(field: attrs.Attribute) -> str:
    """The annotation as written (``int | None`` shows as ``int``: unset is the default)."""
    kind = field.type
    text = kind.__name__ if isinstance(kind, type) else str(kind)  # resolved or still a string
    # A resolved generic prints its arguments with their modules (list[pkg.mod.Pair]),
    # the string as written does not; show the short names either way.
    text = _DOTTED.sub(r"\1", text)
    return text.replace(" | None", "")


def _default(field: attrs.Attribute) -> Any:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()  # type: ignore[union-attr]
    return unstructure(default)


def _describe_default(field: attrs.Attribute) -> str:
    value = _default(field)
    return "unset" if value is None else _toml_value(value)


def sections() -> list[str]:
    """The core sections of :class:`RunConfig`, in file order."""
    return [f.name for f in attrs.fields(RunConfig) if f.name not in COMPONENT_KINDS]


def _section_class(name: str) -> type:
    return type(getattr(RunConfig(), name))


def reference_markdown() -> str:
    lines = [TITLE, "", INTRO]
    for name in sections():
        cls = _section_class(name)
        lines += [f"## `[{name}]`", "", (cls.__doc__ or "").strip().splitlines()[0], ""]
        lines += ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
        for field in attrs.fields(cls):
            doc = str(field.metadata.get("doc", "")).replace("|", "\\|")
            default = _describe_default(field).replace("|", "\\|")
            lines.append(
                f"| `{name}.{field.name}` | {_type_name(field)} | `{default}` | "
                f"{_allowed(field)} | {doc} |"
            )
        lines.append("")
    lines += [
        "## Bounds",
        "",
        "Every number that scales work or memory has an upper bound, far beyond any sensible "
        "setting and low enough that no value runs for years or allocates without end; a value "
        "outside is refused in one line naming the key (exit code 2). Lists a run chooses from "
        "(`env.blueprints`, `lifecycle.styles`, `env.slots`) must not be empty.",
        "",
        "| bound | what it limits | why |",
        "|---|---|---|",
        *(f"| {bound} | {what} | {why} |" for bound, what, why in BOUNDS),
        "",
    ]
    return "\n".join(lines)


def _field_lines(prefix: str, instance: Any) -> list[str]:
    """``key = value`` lines with a comment above each: description and default."""
    lines: list[str] = []
    for field in attrs.fields(type(instance)):
        value = unstructure(getattr(instance, field.name))
        doc = str(field.metadata.get("doc", "")).strip()
        note = f"default: {_describe_default(field)}"
        lines.append(f"# {doc} ({note})" if doc else f"# ({note})")
        if value is None:
            lines.append(f"# {field.name} = (unset)")
        else:
            lines.append(f"{field.name} = {_toml_value(value)}")
    return lines


def annotated_toml(config: RunConfig, components: dict[str, Any] | None = None) -> str:
    """Every key of ``config``, its value, default and description; ``components`` maps
    ``kind.name`` to the validated options of each selected component."""
    out: list[str] = []
    for name in sections():
        out += [f"[{name}]", *_field_lines(name, getattr(config, name)), ""]
    for table, options in (components or {}).items():
        if attrs.has(type(options)) and attrs.fields(type(options)):
            out += [f"[{table}]", *_field_lines(table, options), ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(reference_markdown(), end="")
