"""The cyclic collector paused over blocks that make many surviving objects (store.rows.gc_paused),
counted across threads and nesting."""

from __future__ import annotations


def test_the_collector_is_paused_while_reading_and_restored_after() -> None:
    """Nested and from several threads, the collector runs again once the last block leaves (if it
    ran before: an application that turned it off keeps it off)."""
    import gc
    import threading

    from turnlog.store.rows import gc_paused

    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def reader() -> None:
        with gc_paused():
            inside.set()
            assert leave.wait(30)

    other = threading.Thread(target=reader)
    with gc_paused():
        other.start()
        assert inside.wait(30)
        with gc_paused():
            assert not gc.isenabled()
    assert not gc.isenabled()  # the other reader is still inside
    leave.set()
    other.join()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
