"""Hugging Face `datasets` → cases: a `save_to_disk` folder or a hub dataset already in the local cache.

The hub is never asked: the cache is read offline (`HF_HUB_OFFLINE`), so a
name that was never downloaded is refused with what to do, not fetched.
Rows become cases by the field flags: `--prompt-field` (text, sent as one
user message, or a list of chat messages), `--reference-field` (text or a
list of accepted texts, checked by `--check`: `exact` by default, or
`contains` / `icontains`), `--id-field`, `--category-field`. `datasets` is
the `datasets` extra, imported only here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qualitycheck.core._errors import ConfigError, Problem
from qualitycheck.importers._common import Drafted, ImportOptions, Item, regex_alternation, stem_of

__all__ = ["CHECKS", "read_hf_datasets"]

CHECKS = ("exact", "contains", "icontains")
"""How `--check` checks a row's reference."""
_OFFLINE = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def _datasets() -> Any:
    saved = {k: os.environ.get(k) for k in _OFFLINE}
    os.environ.update(dict.fromkeys(_OFFLINE, "1"))  # read once, when datasets and huggingface_hub are first imported
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            [
                Problem(
                    "command line",
                    None,
                    "FORMAT",
                    "the hf-datasets format needs the `datasets` package: pip install 'qualitycheck[datasets]'",
                )
            ]
        ) from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return datasets


@contextlib.contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """The hub stays unasked even when `datasets` was imported before with the hub online."""
    import huggingface_hub.constants as hub

    saved = (datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE = saved


def _load(src: str, split: str | None) -> tuple[Any, str]:
    datasets = _datasets()
    path = Path(src)
    with _offline(datasets):
        if path.exists():
            try:
                data = datasets.load_from_disk(str(path))
            except (FileNotFoundError, ValueError) as exc:
                raise ConfigError([Problem(src, None, "", f"not a dataset saved with save_to_disk ({exc})")]) from None
        else:
            try:
                data = datasets.load_dataset(src, split=split)
            except Exception as exc:  # datasets raises its own families (ConnectionError, DatasetNotFoundError, ValueError)
                raise ConfigError(
                    [
                        Problem(
                            src,
                            None,
                            "",
                            f"not a local folder, and not in the local Hugging Face cache ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); "
                            "the hub is not asked: load it once with datasets.load_dataset where the hub is reachable, or give its save_to_disk folder",
                        )
                    ]
                ) from None
    if isinstance(data, datasets.DatasetDict):
        names = sorted(data)
        if split is None and len(names) == 1:
            split = names[0]
        if split is None or split not in data:
            raise ConfigError(
                [Problem("command line", None, "--split", f"choose one of the splits {names}" + (f", not {split!r}" if split else ""))]
            )
        return data[split], split
    return data, split or ""


def _reference_check(refs: list[str], check: str) -> dict[str, Any]:
    if check == "exact":
        return {"exact": refs[0]} if len(refs) == 1 else {"regex": {"pattern": regex_alternation(refs), "mode": "fullmatch"}}
    return {"contains": {"any": refs, "ignore_case": check == "icontains"}}


def read_hf_datasets(src: Path, options: ImportOptions) -> Iterator[Item]:
    """Every row of the dataset's split (see the module doc)."""
    if not options.prompt_field:
        raise ConfigError([Problem("command line", None, "--prompt-field", "required: the column that holds the prompt")])
    check = options.check or "exact"
    if check not in CHECKS:
        raise ConfigError([Problem("command line", None, "--check", f"expected one of {', '.join(CHECKS)}, got {check!r}")])
    if options.check and not options.reference_field:
        raise ConfigError([Problem("command line", None, "--check", "needs --reference-field: the column it checks against")])
    where = str(src)
    data, split = _load(where, options.split)
    columns = set(data.column_names)
    for flag, name in (
        ("--prompt-field", options.prompt_field),
        ("--reference-field", options.reference_field),
        ("--id-field", options.id_field),
        ("--category-field", options.category_field),
    ):
        if name is not None and name not in columns:
            raise ConfigError([Problem(where, None, flag, f"no column {name!r} (columns: {', '.join(sorted(columns))})")])
    name = stem_of(where)
    origin = f"hugging face dataset {where}" + (f" [{split}]" if split else "")
    for i, row in enumerate(data):
        yield _row(row, i, where, name, origin, options, check)


def _row(row: dict[str, Any], i: int, where: str, name: str, origin: str, options: ImportOptions, check: str) -> Drafted | Problem:
    at = f"[{i}]"
    prompt = row[str(options.prompt_field)]
    case: dict[str, Any] = {}
    if options.id_field is not None:
        rid = row[options.id_field]
        if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid) == "":
            return Problem(where, None, f"{at}.{options.id_field}", "expected a non-empty id (text or a whole number)")
        case["id"] = str(rid)
    else:
        case["id"] = f"{name}-{i}"
    if options.category_field is not None:
        cat = row[options.category_field]
        if not isinstance(cat, str) or not cat:
            return Problem(where, None, f"{at}.{options.category_field}", "expected a non-empty category name")
        case["category"] = cat
    else:
        case["category"] = options.category or name
    if isinstance(prompt, str):
        case["messages"] = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m for m in prompt):
        case["messages"] = [{k: v for k, v in m.items() if v is not None} for m in prompt]
    else:
        return Problem(where, None, f"{at}.{options.prompt_field}", "expected text or a list of chat messages ({role, content})")
    if options.reference_field is not None:
        ref = row[options.reference_field]
        refs = [ref] if isinstance(ref, str) else ref
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
            return Problem(where, None, f"{at}.{options.reference_field}", "expected text or a non-empty list of texts")
        case["checks"] = _reference_check(refs, check)
    case["source"] = f"{origin} row {i}"
    return Drafted(case, where, None, at)
