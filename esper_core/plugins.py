"""The plugin manager: discovery, extra plugin modules, registries and listing.

Plugins are modules that implement hooks from :mod:`esper_core.hookspecs`. They are
found through the ``esper`` entry-point group (entry-point name = plugin name, e.g.
``rewards.pbrs``) and through ``--plugin pkg.module`` or ``--plugin path/to/file.py``.
Each kind of component has one typed :class:`Registry`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, TypeVar

import attrs
import pluggy
from attrs import define, field, frozen

from esper_core import hookspecs
from esper_core.errors import (
    ConfigError,
    DuplicateComponentError,
    EsperError,
    PluginError,
    UnknownComponentError,
)
from esper_core.version import __version__

T = TypeVar("T")

ENTRY_POINT_GROUP = "esper"
DISABLE_AUTOLOAD_ENV = "ESPER_DISABLE_PLUGIN_AUTOLOAD"
KINDS = ("tasks", "blueprints", "operators", "rewards", "policies", "telemetry", "executors",
         "runners")  # fmt: skip
_HOOK_OF_KIND = {kind: f"esper_register_{kind}" for kind in KINDS}


# Where each first-party component lives (the repository's plugins/ directories), so an
# unknown name that is one of ours says what to install. A test keeps this in step with
# the plugins' entry points; a tuple, not a registry, because nothing may add to it.
FIRST_PARTY_PLUGINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("plugins/esper-tasks", ("tasks.digits", "tasks.cifar10", "tasks.charlm", "tasks.glyphs",
                             "tasks.dataset")),
    ("plugins/esper-rewards", ("rewards.pbrs", "rewards.shaped", "rewards.simplified",
                               "rewards.sparse", "rewards.loss")),
    ("plugins/esper-operators", ("operators.width", "operators.depth")),
    ("plugins/esper-tamiyo-heuristic", ("policies.heuristic", "policies.random",
                                        "policies.schedule", "policies.static", "policies.wait")),
    ("plugins/esper-tamiyo-ppo", ("policies.ppo",)),
    ("plugins/esper-telemetry", ("telemetry.console", "telemetry.jsonl", "telemetry.csv",
                                 "telemetry.tensorboard", "telemetry.wandb")),
    ("plugins/esper-streams", ("executors.streams", "executors.distributed")),
    ("plugins/esper-ray", ("runners.ray",)),
    ("plugins/esper-slurm", ("runners.slurm",)),
)  # fmt: skip


def missing_plugin_hint(kind: str, name: str) -> str:
    """For a first-party component that is not registered: ``" (...)"`` saying how to get
    it: install its package, or name it when the package is installed but was not loaded
    (autoloading off). Empty for any other name."""
    plugin = f"{kind}.{name}"
    home = next((d for d, names in FIRST_PARTY_PLUGINS if plugin in names), None)
    if home is None:
        return ""
    package = home.rsplit("/", 1)[-1].replace("-", "_")
    try:
        installed = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed install counts as absent
        installed = False
    if installed:
        return (
            f" (installed but not loaded: add --plugin {plugin}, or unset {DISABLE_AUTOLOAD_ENV})"
        )
    return f" (it comes with {home}, not installed: pip install -e {home})"


@frozen
class PluginInfo:
    """What ``esper plugins`` shows about one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    components: tuple[str, ...] = ()


@frozen
class Registered(Generic[T]):
    component: T
    plugin: str


@define
class Registry(Generic[T]):
    """Components of one kind, by name; duplicates and unknown names fail clearly."""

    kind: str
    _items: dict[str, Registered[T]] = field(factory=dict)

    def add(self, name: str, component: T, plugin: str) -> None:
        if name in self._items:
            other = self._items[name].plugin
            raise DuplicateComponentError(
                f"{self.kind} component {name!r} is registered twice: by plugin {other!r} "
                f"and by plugin {plugin!r}; uninstall or disable one of them"
            )
        self._items[name] = Registered(component, plugin)

    def get(self, name: str) -> T:
        try:
            return self._items[name].component
        except KeyError:
            available = ", ".join(sorted(self._items)) or "(none: is the plugin installed?)"
            raise UnknownComponentError(
                f"unknown {self.kind} component {name!r}{missing_plugin_hint(self.kind, name)}; "
                f"available: {available}"
            ) from None

    def plugin_of(self, name: str) -> str:
        self.get(name)
        return self._items[name].plugin

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        return [(name, self._items[name].component) for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)


def _component_key(kind: str, component: Any, plugin: str) -> str:
    """Validate a registered component's shape and return its registry key."""
    if kind == "blueprints":
        from esper_core.components.blueprint import Blueprint

        if not isinstance(component, Blueprint):
            raise PluginError(
                f"plugin {plugin!r} registered {component!r} as a blueprint; "
                "register esper_core.components.blueprint.Blueprint values"
            )
        return component.key
    if kind == "operators":
        from esper_core.components.growth_operator import operator_key

        return operator_key(component, plugin)
    missing = [attr for attr in ("name", "description", "Options") if not hasattr(component, attr)]
    if missing:
        raise PluginError(
            f"plugin {plugin!r} registered {component!r} as a {kind} component, but it lacks "
            f"{', '.join(missing)}; components need a name, a description and an attrs Options class"
        )
    if not attrs.has(component.Options):
        raise PluginError(f"plugin {plugin!r}: {component.name}.Options must be an attrs class")
    return str(component.name)


# The components that ship with the core: plugin name -> module.
BUILTIN_PLUGINS = {
    "executors.serial": "esper_core.run.executor",
    "runners.local": "esper_core.compare.local_runner",
}


class PluginManager:
    """Loads plugins and holds one registry per component kind.

    ``extra`` names modules to load in addition to the installed plugins: a dotted
    module (``pkg.module``), a file (``path/to/file.py``) or, when autoloading is
    disabled, the name of an installed entry point (``rewards.pbrs``).
    """

    def __init__(self, extra: Sequence[str] = (), autoload: bool | None = None) -> None:
        if autoload is None:
            autoload = os.environ.get(DISABLE_AUTOLOAD_ENV, "") not in ("1", "true", "yes")
        self.autoload = autoload
        self.pm = pluggy.PluginManager("esper")
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.registries: dict[str, Registry[Any]] = {kind: Registry(kind) for kind in KINDS}
        # The core's own components are plugins too, loaded by name like entry points so
        # that the plugin manager does not depend on the packages that use it.
        for name, module in BUILTIN_PLUGINS.items():
            self._register_module(importlib.import_module(module), name, "esper", _own_version())
        self._entry_points = {
            ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        }
        if autoload:
            for ep in self._entry_points.values():
                self._load_entry_point(ep)
        self.extend(extra)

    def extend(self, extra: Sequence[str]) -> None:
        """Load more plugin modules (``--plugin`` values) and rebuild the registries."""
        for spec in extra:
            self.load_extra(spec)
        self._check_pending()
        self.registries = {kind: Registry(kind) for kind in KINDS}
        self.infos = {name: attrs.evolve(info, components=()) for name, info in self.infos.items()}
        self._collect()

    # ------------------------------------------------------------ loading

    def _register_module(
        self, module: ModuleType, name: str, dist: str | None, version: str | None
    ) -> None:
        if self.pm.is_registered(module) or name in self.infos:
            return
        try:
            self.pm.register(module, name=name)
        except ValueError as exc:
            raise PluginError(f"plugin {name!r} could not be registered: {exc}") from exc
        self.infos[name] = PluginInfo(
            name=name, module=module.__name__, distribution=dist, version=version
        )

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        try:
            module = ep.load()
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _ended(ep.name, "while importing", exc) from None
        except Exception as exc:
            raise PluginError(
                f"plugin {ep.name!r} (entry point {ep.value!r}) failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        dist = ep.dist.metadata["Name"] if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        self._register_module(module, ep.name, dist, version)

    def load_extra(self, spec: str) -> None:
        """Load one ``--plugin`` argument that names a module, a file or an entry point."""
        if spec.endswith(".py") or os.sep in spec or "/" in spec:
            self._load_file(Path(spec))
        elif spec in self._entry_points:
            self._load_entry_point(self._entry_points[spec])
        elif _looks_like_selection(spec):
            return  # KIND.NAME selects a component; resolved by the runner, not loaded here
        else:
            self._load_module(spec)

    def _load_file(self, path: Path) -> None:
        if not path.is_file():
            raise PluginError(f"--plugin {path}: no such file")
        name = f"file:{path.resolve()}"
        module_name = f"esper_local_plugin_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise PluginError(f"--plugin {path}: not a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _ended(str(path), "while importing", exc) from None
        except Exception as exc:
            raise PluginError(
                f"plugin {str(path)!r} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        self._register_module(module, name, None, None)

    def _load_module(self, dotted: str) -> None:
        try:
            module = importlib.import_module(dotted)
        except ModuleNotFoundError as exc:
            if exc.name and dotted.startswith(exc.name):
                raise PluginError(
                    f"--plugin {dotted}: no module, file or installed plugin of that name; "
                    f"installed plugins: {', '.join(sorted(self._entry_points)) or '(none)'}"
                ) from None
            raise PluginError(f"plugin {dotted!r} failed to import: {exc}") from exc
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _ended(dotted, "while importing", exc) from None
        except Exception as exc:
            raise PluginError(
                f"plugin {dotted!r} failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        self._register_module(module, dotted, None, None)

    def _check_pending(self) -> None:
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            plugin = self.pm.get_name(exc.plugin) or repr(exc.plugin)
            known = ", ".join([*sorted(_HOOK_OF_KIND.values()), "esper_register_commands"])
            raise PluginError(
                f"plugin {plugin!r} implements an unknown hook ({exc}); known hooks: {known}"
            ) from None

    # ------------------------------------------------------------ registries

    def _call_each(self, hook_name: str, make_args: Callable[[str], dict[str, Any]]) -> None:
        """Call every implementation of a hook on its own, so failures name their plugin."""
        caller = getattr(self.pm.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):
            try:
                impl.function(**make_args(impl.plugin_name))
            except (PluginError, DuplicateComponentError):
                raise
            except (SystemExit, KeyboardInterrupt) as exc:
                raise _ended(impl.plugin_name, f"in {hook_name}", exc) from None
            except Exception as exc:
                raise PluginError(
                    f"plugin {impl.plugin_name!r} failed in {hook_name}: {type(exc).__name__}: {exc}"
                ) from exc

    def _collect(self) -> None:
        for kind, hook_name in _HOOK_OF_KIND.items():
            registry = self.registries[kind]

            def make_args(
                plugin: str, kind: str = kind, registry: Registry[Any] = registry
            ) -> dict[str, Any]:
                def register(component: Any) -> None:
                    key = _component_key(kind, component, plugin)
                    registry.add(key, component, plugin)
                    info = self.infos.get(plugin)
                    if info is not None:
                        self.infos[plugin] = attrs.evolve(
                            info, components=(*info.components, f"{kind}.{key}")
                        )

                return {"register": register}

            self._call_each(hook_name, make_args)

    def add_commands(self, cli: Any) -> None:
        self._call_each("esper_register_commands", lambda _plugin: {"cli": cli})

    def registry(self, kind: str) -> Registry[Any]:
        return self.registries[kind]

    def get(self, kind: str, name: str) -> Any:
        return self.registries[kind].get(name)

    def plugins(self) -> list[PluginInfo]:
        return sorted(self.infos.values(), key=lambda info: info.name)

    def blueprints_for(self, topology: str) -> list[Any]:
        """Registered blueprints of one topology, in a stable (name) order."""
        return [bp for _, bp in self.registries["blueprints"].items() if bp.topology == topology]


def _ended(plugin: str, during: str, exc: BaseException) -> EsperError:
    """The error for plugin code that tried to end the process instead of raising.

    ``sys.exit()`` inside a plugin would end ``esper`` with that code (even 0, "success")
    having done nothing, and an interrupt would not say where it struck.
    """
    from esper_core.run.interrupts import Interrupted

    if isinstance(exc, KeyboardInterrupt):
        return Interrupted(f"interrupted {during} plugin {plugin!r} (KeyboardInterrupt)")
    return PluginError(
        f"plugin {plugin!r} called sys.exit({getattr(exc, 'code', None)!r}) {during}; "
        "a plugin must raise an exception, not end the process"
    )


def _own_version() -> str:
    return __version__


def _looks_like_selection(spec: str) -> bool:
    kind, dot, name = spec.partition(".")
    return bool(dot) and kind in KINDS and bool(name) and "." not in name


def split_selections(specs: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split ``--plugin`` values into modules to load and ``KIND.NAME`` selections."""
    loads: list[str] = []
    selections: dict[str, list[str]] = {}
    for spec in specs:
        if _looks_like_selection(spec) and not (spec.endswith(".py") or "/" in spec):
            kind, _, name = spec.partition(".")
            selections.setdefault(kind, []).append(name)
            loads.append(spec)  # with autoload disabled this loads the entry point of that name
        else:
            loads.append(spec)
    return loads, selections


def require_module(module: str, needed_by: str, install: str) -> ModuleType:
    """Import an optional dependency of a component, or fail in one line saying how to
    install it (a user error: exit 2, no traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError([f"{needed_by} needs {module}: {install}"]) from None
