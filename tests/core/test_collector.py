"""The collector during long rewrites: paused, young collections, a frozen heap."""

from __future__ import annotations

import gc

import pytest

from onnxscript_ep_passes.core.collector import (
    collect_young,
    freeze_young,
    frozen_heap,
    paused_collector,
)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_paused_collector_restores_the_collector_state() -> None:
    gc.enable()  # as a process starts
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block found it off: leaves it off
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_collector():
        raise RuntimeError
    assert gc.isenabled()


def test_a_frozen_heap_hides_what_exists_and_what_freeze_young_adds_then_gives_it_back() -> None:
    with paused_collector():
        collect_young()
        before = _Cycle()
        with frozen_heap():
            assert gc.get_freeze_count() > 0
            made = _Cycle()
            assert any(o is made for o in gc.get_objects(0))
            freeze_young()
            assert not any(o is made for o in gc.get_objects(0))  # out of reach now
            assert not any(o is before for o in gc.get_objects(0))
            young = _Cycle()
            del young
            assert collect_young() >= 1  # what is made inside is still collected
        assert gc.get_freeze_count() == 0  # everything given back
        assert any(o is made for o in gc.get_objects()) and before.me is before


def test_a_frozen_heap_leaves_another_owners_freeze_alone() -> None:
    theirs = _Cycle()
    gc.freeze()
    try:
        with frozen_heap():
            made = _Cycle()
            freeze_young()  # not frozen by this block: nothing happens
            assert any(o is made for o in gc.get_objects(0))
        # Not unfrozen: the other owner's object is still in the permanent generation.
        # (The freeze count itself can drop meanwhile: frozen objects that die leave it.)
        assert gc.get_freeze_count() > 0
        assert not any(o is theirs for o in gc.get_objects())
    finally:
        gc.unfreeze()
    freeze_young()  # outside any frozen heap: nothing
    assert gc.get_freeze_count() == 0


def test_a_block_the_process_ends_after_leaves_its_garbage_frozen() -> None:
    gc.enable()
    try:
        with paused_collector(process_end=True):
            _Cycle()  # garbage only a collection would free
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # frozen, not scanned again
    finally:
        gc.unfreeze()
