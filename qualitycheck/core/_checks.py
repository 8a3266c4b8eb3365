"""The open set of check families a case's `checks` may name, and how a spec is validated.

A family is the unit a case author writes under `checks` (`json`, `sql`,
`python`, ...): a key, a spec model, the check names the spec produces (`json`
→ `json_parse` + `json_schema` when a schema is given), an optional load-time
hook (files relative to the suite file) and a scorer factory. Everything that
knows about a family lives in that one declaration; `Checks`,
`Case.check_names()` and suite validation only ask this registry.

Why the container is here and the families are not: `core` is the lowest
layer and must not import `scoring`, yet a case cannot be validated without
its families. So `core` holds the registry and the validation, and the
families register themselves into it from `scoring` (its `check_family`
decorator). The package front `qualitycheck/__init__.py` imports
`qualitycheck.scoring`, and Python runs that front before any submodule, so
the built-in families are registered before any case is read. Families of
installed packages come from the entry-point group `qualitycheck.checks`
(entry-point name = family key), loaded the first time a case names the key,
so a broken plugin only affects suites that use it.
"""

from __future__ import annotations

import copy
import difflib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from qualitycheck.core._cases import Case

__all__ = [
    "ENTRY_POINT_GROUP",
    "CheckFamily",
    "CheckFamilyError",
    "CheckRegistry",
    "CheckSpec",
    "Checks",
    "LoadContext",
    "check_registry",
]

ENTRY_POINT_GROUP = "qualitycheck.checks"
"""Installed packages declare families here: `<family key> = "<module>"` (or `"<module>:<object>"`)."""


class CheckSpec(BaseModel):
    """Base of every family's spec: immutable, and an unknown key is a problem, not ignored.

    Validators are built on first use (`defer_build`): every family is
    declared when `qualitycheck` is imported, also by commands that never read a case.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


@dataclass
class LoadContext:
    """What a family's `load` hook sees while a suite file is read: the file's folder and a problem sink."""

    folder: Path
    """The folder of the suite file; relative paths in a spec are relative to it."""
    problems: list[tuple[str, str]] = field(default_factory=list)

    def problem(self, field: str, message: str) -> None:
        """Report a problem at `checks.<key><field>` (`field` like "schema_file" or "[0].function")."""
        self.problems.append((field, message))


@dataclass(frozen=True)
class CheckFamily:
    """One family of checks: everything the rest of the tool needs to know about a `checks` key."""

    key: str
    """The key under `checks` (`json`, `sql`, `python`)."""
    spec: type[BaseModel]
    """Validates the value under the key, shorthands included (a `model_validator(mode="before")`)."""
    names: tuple[str, ...]
    """Every check name the family can produce; reserved, so a custom check cannot take one."""
    produces: Callable[[Any], Sequence[str]] | None = None
    """The names one spec produces, in order; None: all of `names`."""
    build: Callable[[Any, Case], Sequence[Any]] | None = None
    """Spec and case → scorers, one per produced name; None when another stage scores it (the judge)."""
    load: Callable[[Any, LoadContext], Any] | None = None
    """At suite load: check and resolve the spec against the suite's folder; returns the spec to keep."""
    origin: str = ""
    """Where the declaration came from (module, or entry point), for messages."""

    def names_of(self, spec: Any) -> list[str]:
        return list(self.produces(spec) if self.produces is not None else self.names)


class CheckFamilyError(Exception):
    """A family cannot be declared or loaded (taken key, broken entry point); the message names it."""


class CheckRegistry:
    """Families by key, in declaration order; entry-point families are loaded on first use of their key.

    Thread-safe: scoring builds scorers in worker threads, and the first
    lookup of a plugin's key may happen in any of them.
    """

    def __init__(self, group: str = ENTRY_POINT_GROUP):
        self._group = group
        self._families: dict[str, CheckFamily] = {}
        self._ranks: dict[str, int] | None = None
        """key → position in declaration order, rebuilt after a family is added or removed (`rank` runs per case read)."""
        self._lock = threading.RLock()
        self._entry_points: dict[str, EntryPoint] | None = None
        self._failed: dict[str, str] = {}

    def register(self, family: CheckFamily) -> CheckFamily:
        """Add a family; a key already taken by another declaration is an error naming both.

        The same declaration made again (its module imported a second time, as
        `importlib.reload` or pytester's module snapshots do) replaces the first.
        """
        if not family.key.isidentifier():
            raise CheckFamilyError(f"check family key {family.key!r} ({family.origin}) is not an identifier")
        with self._lock:
            old = self._families.get(family.key)
            if old is not None and old is not family and not (family.origin and old.origin == family.origin):
                raise CheckFamilyError(
                    f"check family {family.key!r} of {family.origin or 'unknown origin'} is "
                    f"already declared by {old.origin or 'another module'}"
                )
            self._families[family.key] = family
            self._ranks = None
        return family

    def unregister(self, key: str) -> None:
        """Remove a family (tests that declare one at runtime clean up with this)."""
        with self._lock:
            self._families.pop(key, None)
            self._ranks = None

    def get(self, key: str) -> CheckFamily | None:
        """The family of `key`: a declared one, else the entry point of that name (loaded once); None if unknown.

        Raises CheckFamilyError when the entry point exists but fails to load.
        """
        fam = self._families.get(key)
        if fam is not None:
            return fam
        with self._lock:
            fam = self._families.get(key)
            if fam is not None:
                return fam
            if key in self._failed:
                raise CheckFamilyError(self._failed[key])
            ep = self._plugins().get(key)
            if ep is None:
                return None
            try:
                self._load(key, ep)
            except CheckFamilyError as exc:
                self._failed[key] = str(exc)
                raise
            return self._families[key]

    def __getitem__(self, key: str) -> CheckFamily:
        fam = self.get(key)
        if fam is None:
            raise KeyError(key)
        return fam

    def families(self) -> list[CheckFamily]:
        """The declared families (entry-point families only once loaded), in declaration order."""
        with self._lock:
            return list(self._families.values())

    def known_keys(self) -> list[str]:
        """Every key a case may use: declared ones and installed entry points (not loaded by this)."""
        with self._lock:
            return [*self._families, *(k for k in self._plugins() if k not in self._families)]

    def reserved_names(self) -> dict[str, str]:
        """Check name → the key of the declared family that can produce it."""
        out: dict[str, str] = {}
        for fam in self.families():
            for name in fam.names:
                out.setdefault(name, fam.key)
        return out

    def rank(self, key: str) -> int:
        """A family's position in declaration order: the order a case's checks are listed and scored in."""
        ranks = self._ranks
        if ranks is None:
            with self._lock:
                ranks = self._ranks = {k: i for i, k in enumerate(self._families)}
        return ranks.get(key, len(ranks))

    def suggest(self, key: str) -> str | None:
        """The closest known key to a misspelt one (did-you-mean), or None."""
        close = difflib.get_close_matches(key, self.known_keys(), n=1, cutoff=0.6)
        return close[0] if close else None

    # ------------------------------------------------------------ entry points
    def _plugins(self) -> dict[str, EntryPoint]:
        if self._entry_points is None:
            from importlib.metadata import entry_points

            eps: dict[str, EntryPoint] = {}
            for ep in entry_points(group=self._group):
                eps.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
            self._entry_points = eps
        return self._entry_points

    def _load(self, key: str, ep: EntryPoint) -> None:
        dist = getattr(ep, "dist", None)
        where = f"entry point {ep.name!r} = {ep.value!r} in group {self._group!r}" + (
            f" (package {dist.name} {dist.version})" if dist is not None else ""
        )
        try:
            obj = ep.load()
        except CheckFamilyError as exc:
            raise CheckFamilyError(f"{where} failed to load: {exc}") from None
        except Exception as exc:  # the plugin's own import error, whatever it is: name it, do not crash
            raise CheckFamilyError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        if key not in self._families and isinstance(obj, CheckFamily) and obj.key == key:
            self.register(obj)
        if key not in self._families:
            raise CheckFamilyError(
                f"{where} loaded, but declares no check family {key!r} (declared: {', '.join(self._families) or 'none'})"
            )


check_registry = CheckRegistry()
"""The process's registry: built-in families register on `import qualitycheck`, plugins on first use."""


# ---------------------------------------------------------------- Checks


def _init_error(loc: tuple[str | int, ...], kind: str, message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)


class Checks(Mapping[str, BaseModel]):
    """What to verify on an answer: family key → validated spec, in declaration order of the families.

    A read-only mapping (`checks.get("python")`, `"json" in checks`). Each
    declared family is also an attribute holding its spec or None
    (`checks.sql`, `checks.json_` for the `json` key), as the judge and the
    suites' self-test read them.
    """

    __slots__ = ("_raw", "_specs")
    _specs: dict[str, BaseModel]
    _raw: Any

    def __init__(self, specs: Mapping[str, BaseModel] | None = None):
        ordered = sorted((specs or {}).items(), key=lambda kv: check_registry.rank(kv[0]))
        object.__setattr__(self, "_specs", dict(ordered))

    @classmethod
    def deferred(cls, raw: Any) -> Checks:
        """Checks of a stored case, validated (`model_validate`) when first read rather than now.

        A case is validated before it is stored, and most stages that read it
        back never look at its checks (the summary's walk reads every case
        for its category, route and prompt): they skip the validation. A
        stage that does read them gets exactly what `model_validate(raw)`
        gives, and its error, if the checks no longer validate.
        """
        out = cls.__new__(cls)
        object.__setattr__(out, "_raw", raw)
        return out

    @classmethod
    def model_validate(cls, data: Any) -> Checks:
        """Validate a case's raw `checks` (pydantic's ValidationError on problems, locations under each key)."""
        if isinstance(data, Checks):
            return data
        if isinstance(data, BaseModel):
            data = data.model_dump(by_alias=True, exclude_none=True)
        if not isinstance(data, Mapping):
            raise ValidationError.from_exception_data("Checks", [_init_error((), "dict_type", "Input should be a valid dictionary", data)])
        errors: list[InitErrorDetails] = []
        specs: dict[str, BaseModel] = {}
        for key, raw in data.items():
            key = str(key)
            try:
                fam = check_registry.get(key)
            except CheckFamilyError as exc:
                errors.append(_init_error((key,), "check_family", str(exc), raw))
                continue
            if fam is None:
                hint = check_registry.suggest(key)
                errors.append(_init_error((key,), "unknown_check", "unknown key" + (f" (did you mean {hint!r}?)" if hint else ""), raw))
                continue
            if raw is None or raw is False:  # `exact: false`: the family is off
                continue
            try:
                specs[key] = fam.spec.model_validate(raw)
            except ValidationError as exc:
                for err in exc.errors():
                    errors.append(
                        InitErrorDetails(type=PydanticCustomError(err["type"], err["msg"]), loc=(key, *err["loc"]), input=err["input"])
                    )
        out = cls(specs)
        errors.extend(out._collisions())
        if errors:
            raise ValidationError.from_exception_data("Checks", errors)
        return out

    def _collisions(self) -> list[InitErrorDetails]:
        """Two families of one case producing one check name: their scores would overwrite each other."""
        seen: dict[str, str] = {}
        errors: list[InitErrorDetails] = []
        for key, spec in self._specs.items():
            for name in check_registry[key].names_of(spec):
                if name in seen:
                    errors.append(
                        _init_error((key,), "check_name_collision", f"check name {name!r} is also produced by checks.{seen[name]}", name)
                    )
                else:
                    seen[name] = key
        return errors

    def names(self) -> list[str]:
        """The check names these specs produce, in order (see `Case.check_names`)."""
        return [n for key, spec in self._specs.items() for n in check_registry[key].names_of(spec)]

    def replace(self, **specs: BaseModel) -> Checks:
        """A copy with some families' specs swapped (the loader's resolved files)."""
        return Checks({**self._specs, **specs})

    def model_dump(self, *, mode: str = "python", by_alias: bool = True, exclude_none: bool = False) -> dict[str, Any]:
        return {k: s.model_dump(mode=mode, by_alias=by_alias, exclude_none=exclude_none) for k, s in self._specs.items()}

    # Mapping
    def __getitem__(self, key: str) -> BaseModel:
        return self._specs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checks) and self._specs == other._specs

    __hash__ = None  # type: ignore[assignment]  # specs may hold dicts (schemas), as Case does

    def __getattr__(self, name: str) -> Any:
        if name == "_specs":  # a deferred instance's first read (`deferred`)
            specs = Checks.model_validate(object.__getattribute__(self, "_raw"))._specs
            object.__setattr__(self, "_specs", specs)
            return specs
        key = name.removesuffix("_")
        if name.startswith("_") or check_registry.get(key) is None:
            raise AttributeError(f"{type(self).__name__!s} has no check family {key!r}")
        return self._specs.get(key)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Checks is read-only")

    def __repr__(self) -> str:
        return f"Checks({self._specs!r})"

    def __copy__(self) -> Checks:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Checks:
        return Checks({k: copy.deepcopy(v, memo) for k, v in self._specs.items()})  # frozen specs may hold dicts

    def __reduce__(self) -> tuple[Any, ...]:
        return (Checks.model_validate, (self.model_dump(mode="json"),))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda c: dict(c._specs), return_schema=core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
            ),
        )
