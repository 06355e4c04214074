"""``weight_inspect.types`` against the JSON schema the Rust types generate
(``schema/types.schema.json``, written by ``tests/schema.rs``: ``WI_BLESS=1 cargo test --test
tests schema::``): every TypedDict has a definition of its name, the same keys, the same required
ones (``NotRequired`` where the schema does not require it; every key of a ``total=False`` one
optional), and an annotation that fits each property's type; and every object the schema defines
that a TypedDict refers to is a TypedDict of that name.

Compatible means: ``string`` is ``str`` (or a ``Literal`` of the enum's strings, for an enum),
``integer`` ``int``, ``number`` ``float``, ``boolean`` ``bool``, an array ``list[...]`` (a
fixed-length one ``tuple[...]``), a ``$ref`` to an object the TypedDict of that name, and a
nullable type ``... | None`` (and only a nullable one).
"""

from __future__ import annotations

import functools
import json
import operator
import types
from pathlib import Path
from typing import (
    Any,
    Literal,
    NotRequired,
    Required,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

import mismatched_types
import pytest
from weight_inspect import types as wi_types

SCHEMA = Path(__file__).resolve().parents[2] / "schema" / "types.schema.json"
Json = dict[str, Any]


def schema_defs() -> dict[str, Json]:
    defs: dict[str, Json] = json.loads(SCHEMA.read_text())["$defs"]
    return defs


def typeddicts(module: types.ModuleType) -> dict[str, type]:
    """The TypedDicts a module defines (not those it imports)."""
    return {
        name: obj
        for name, obj in vars(module).items()
        if is_typeddict(obj) and getattr(obj, "__module__", None) == module.__name__
    }


def ref_name(schema: Json) -> str | None:
    ref = schema.get("$ref")
    return ref.removeprefix("#/$defs/") if isinstance(ref, str) else None


def split_null(schema: Json) -> tuple[Json, bool]:
    """The schema without ``null``, and whether it allowed ``null``."""
    t = schema.get("type")
    if isinstance(t, list) and "null" in t:
        rest = [x for x in t if x != "null"]
        return {**schema, "type": rest[0] if len(rest) == 1 else rest}, True
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list) and {"type": "null"} in alts:
            rest = [a for a in alts if a != {"type": "null"}]
            others = {k: v for k, v in schema.items() if k != key}
            return ({**others, **rest[0]} if len(rest) == 1 else {**others, key: rest}), True
    return schema, False


def string_enum(schema: Json) -> set[str] | None:
    """The strings of an enum (``oneOf`` of ``const``s, or ``enum``), else ``None``."""
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return set(schema["enum"])
    alts = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(alts, list) and alts and all(isinstance(a.get("const"), str) for a in alts):
        return {a["const"] for a in alts}
    return None


def split_none(ann: Any) -> tuple[Any, bool]:
    """The annotation without ``None``, and whether it allowed ``None``."""
    if get_origin(ann) in (Union, types.UnionType):
        args = get_args(ann)
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            return functools.reduce(operator.or_, rest), True
    return ann, False


def fits(schema: Json, ann: Any, defs: dict[str, Json], at: str) -> list[str]:
    """What is wrong with annotation ``ann`` for a value of ``schema`` (at ``at``)."""
    schema, nullable = split_null(schema)
    ann, optional = split_none(ann)
    if nullable != optional:
        want = "may be null: add `| None`" if nullable else "is never null: drop `| None`"
        return [f"{at}: the schema's value {want}"]
    name = ref_name(schema)
    if name is not None:
        target = defs[name]
        values = string_enum(target)
        if values is not None:
            return fits_enum(values, ann, at, name)
        if is_typeddict(ann) and ann.__name__ == name:
            return []
        return [f"{at}: the schema's {name} is the TypedDict {name}, not {show(ann)}"]
    values = string_enum(schema)
    if values is not None:
        return fits_enum(values, ann, at, "enum")
    t = schema.get("type")
    plain = {"string": str, "integer": int, "number": float, "boolean": bool}
    if isinstance(t, str) and t in plain:
        if ann is plain[t]:
            return []
        return [f"{at}: the schema's {t} is {plain[t].__name__}, not {show(ann)}"]
    if t == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            args = get_args(ann)
            if get_origin(ann) is not tuple or len(args) != len(prefix) or Ellipsis in args:
                return [f"{at}: the schema's array of {len(prefix)} is a tuple of {len(prefix)}, not {show(ann)}"]
            return [p for i, (s, a) in enumerate(zip(prefix, args)) for p in fits(s, a, defs, f"{at}[{i}]")]
        if get_origin(ann) is not list:
            return [f"{at}: the schema's array is a list, not {show(ann)}"]
        return fits(schema.get("items", {}), get_args(ann)[0], defs, f"{at}[]")
    if t == "object" and isinstance(schema.get("additionalProperties"), dict):
        if get_origin(ann) is not dict or get_args(ann)[0] is not str:
            return [f"{at}: the schema's map is dict[str, ...], not {show(ann)}"]
        return fits(schema["additionalProperties"], get_args(ann)[1], defs, f"{at}{{}}")
    return [f"{at}: no rule for the schema {json.dumps(schema)} (annotated {show(ann)}): teach this test"]


def fits_enum(values: set[str], ann: Any, at: str, name: str) -> list[str]:
    if ann is str:
        return []
    if get_origin(ann) is Literal and set(get_args(ann)) == values:
        return []
    return [f"{at}: the schema's {name} is str or Literal{sorted(values)}, not {show(ann)}"]


def show(ann: Any) -> str:
    return getattr(ann, "__name__", None) or repr(ann)


def check_typeddict(cls: type, schema: Json, defs: dict[str, Json], module: types.ModuleType) -> list[str]:
    """What is wrong with TypedDict ``cls`` (of ``module``) for the object ``schema``."""
    name = cls.__name__
    if schema.get("type") != "object":
        return [f"{name}: the schema's {name} is not an object"]
    hints = get_type_hints(cls, globalns=vars(module), include_extras=True)
    props: Json = schema.get("properties", {})
    required = set(schema.get("required", []))
    problems = [f"{name}.{k}: in the schema, missing here" for k in props if k not in hints]
    problems += [f"{name}.{k}: not in the schema" for k in hints if k not in props]
    total = getattr(cls, "__total__", True)
    for key, ann in hints.items():
        if key not in props:
            continue
        # `__required_keys__` is wrong for string annotations before Python 3.14: judge the
        # resolved ones.
        is_required = total
        while get_origin(ann) in (Required, NotRequired):
            is_required = get_origin(ann) is Required
            ann = get_args(ann)[0]
        if is_required and key not in required:
            problems.append(f"{name}.{key}: the schema does not require it: NotRequired[...]")
        if not is_required and key in required:
            problems.append(f"{name}.{key}: the schema requires it: not NotRequired[...]")
        problems += fits(props[key], ann, defs, f"{name}.{key}")
    return problems


def check_module(module: types.ModuleType, defs: dict[str, Json]) -> list[str]:
    """Every TypedDict of ``module`` against ``defs``, and every object that one refers to
    defined as a TypedDict there."""
    classes = typeddicts(module)
    problems = []
    for name, cls in classes.items():
        if name not in defs:
            problems.append(f"{name}: no definition of that name in the schema")
            continue
        problems += check_typeddict(cls, defs[name], defs, module)
    referred = {ref for name in classes if name in defs for ref in refs(defs[name])}
    for ref in sorted(referred):
        if string_enum(defs[ref]) is None and ref not in classes:
            problems.append(f"{ref}: the schema's object has no TypedDict")
    return problems


def refs(schema: Any) -> set[str]:
    """The definitions ``schema`` refers to, directly."""
    if isinstance(schema, dict):
        own = {name} if (name := ref_name(schema)) is not None else set()
        return own.union(*(refs(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(refs(v) for v in schema))
    return set()


def test_the_typeddicts_are_the_rust_types() -> None:
    problems = check_module(wi_types, schema_defs())
    assert not problems, (
        "weight_inspect/types.py disagrees with schema/types.schema.json (the Rust types; "
        "`WI_BLESS=1 cargo test --test tests schema::` rewrites it):\n  " + "\n  ".join(problems)
    )


def test_every_type_python_sees_is_checked() -> None:
    classes = typeddicts(wi_types)
    assert {"FetchRequest", "FetchSummary", "FetchedFile", "Plan", "PlannedFile", "ResidencyStats"} <= set(classes)
    # Every object of the schema is a TypedDict (enums are str or Literal).
    defs = schema_defs()
    objects = {name for name, s in defs.items() if string_enum(s) is None}
    assert objects == set(classes)


@pytest.mark.parametrize(
    "problem",
    [
        "RetryCauses.mirror: the schema's integer is int, not float",
        "ConnectionPath.settled: the schema's Settled is str or Literal",
        "ConnectionPath.steps[]: the schema's array of 2 is a tuple of 2",
        "Verification.format: the schema's value may be null: add `| None`",
        "Verification.warnings[]: the schema's string is str, not int",
        "Verification.covered_by: the schema does not require it: NotRequired[...]",
        "Verification.extra: not in the schema",
        "PlannedFile.path: the schema requires it: not NotRequired[...]",
        "Plan.refused[]: the schema's RefusedEntry is the TypedDict RefusedEntry",
        "Plan.witness: the schema's Witness is the TypedDict Witness",
        "RefusedEntry: the schema's object has no TypedDict",
    ],
)
def test_the_check_finds_what_is_wrong(problem: str) -> None:
    problems = check_module(mismatched_types, schema_defs())
    assert any(p.startswith(problem) for p in problems), "\n".join(problems)


def test_the_check_finds_a_missing_key() -> None:
    class ResidencyStats(TypedDict):
        limit: int

    module = types.ModuleType(__name__)
    problems = check_typeddict(ResidencyStats, schema_defs()["ResidencyStats"], schema_defs(), module)
    assert "ResidencyStats.resident: in the schema, missing here" in problems, problems

