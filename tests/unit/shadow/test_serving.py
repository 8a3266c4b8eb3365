"""The proxy process's own settings for serving: what it changes in the interpreter once it listens."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from qualitycheck.shadow._loop import GC_YOUNG, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_serving_freezes_start_up_objects_and_collects_young_garbage_less_often(restored_gc: None) -> None:
    before = gc.get_threshold()
    tune_gc()
    assert gc.get_freeze_count() > 0  # imported modules are never walked again
    assert gc.get_threshold() == (GC_YOUNG, *before[1:])
    assert before[0] < GC_YOUNG
