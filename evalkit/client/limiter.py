"""A semaphore whose size can change while requests are in flight (the scheduler's, resized by auto)."""

from __future__ import annotations

import asyncio
from collections import deque


class Limiter:
    """A semaphore whose size can change while requests are in flight. Taking a free slot and giving one back
    cost no lock and no wake-up when nobody waits (the scheduler takes and gives two per request)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.closed = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def acquire(self) -> bool:
        """Wait for a slot and take it; False (no slot taken) once closed, also for those already waiting."""
        while not self.closed:
            if self.active < self.limit:
                self.active += 1
                return True
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter  # a waiter cancelled meanwhile is skipped by the next wake-up
        return False

    def _wake(self) -> None:
        """Every waiter looks again (as a condition's notify_all)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def release(self, n: int = 1) -> None:
        """Give ``n`` slots back."""
        self.active -= n
        if self._waiters:
            self._wake()

    def set_limit(self, limit: int) -> None:
        self.limit = limit
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()
