"""A warm pool of sandboxes, so that many runs go in parallel without paying start-up each time."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, TypeVar

from rlvr_factory.sandbox.core import Sandbox

T = TypeVar("T")
R = TypeVar("R")


class SandboxPool:
    """`size` started sandboxes, lent out one caller at a time; a broken one is replaced on return.

        with SandboxPool(2) as pool:
            results = pool.map(lambda box, argv: box.run(argv), commands)
    """

    def __init__(self, size: int = 2, **sandbox_options: Any) -> None:
        if size < 1:
            raise ValueError(f"a sandbox pool needs size >= 1, got {size}")
        self.size = size
        self.sandbox_options = sandbox_options
        self._idle: queue.Queue[Sandbox] = queue.Queue()
        self._all: list[Sandbox] = []
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start every sandbox now (from this thread), rather than on first use."""
        with self._lock:
            while len(self._all) < self.size:
                box = Sandbox(**self.sandbox_options)
                box.start()
                self._all.append(box)
                self._idle.put(box)

    @contextmanager
    def acquire(self) -> Iterator[Sandbox]:
        """An idle sandbox (waiting for one if all are busy), restarted first if it broke."""
        if self._closed:
            raise RuntimeError("this SandboxPool is closed")
        if len(self._all) < self.size:
            self.start()
        box = self._idle.get()
        try:
            if not box.alive:
                box.start()
            yield box
        finally:
            self._idle.put(box)

    def map(self, function: Callable[[Sandbox, T], R], items: Iterable[T]) -> list[R]:
        """`function(sandbox, item)` for every item, `size` at a time, results in input order."""
        self.start()

        def one(item: T) -> R:
            with self.acquire() as box:
                return function(box, item)

        with ThreadPoolExecutor(self.size) as executor:
            return list(executor.map(one, items))

    def close(self) -> None:
        """Stop every sandbox."""
        self._closed = True
        with self._lock:
            for box in self._all:
                box.close()
            self._all.clear()
