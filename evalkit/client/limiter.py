"""A semaphore whose size can change while requests are in flight (the scheduler's, resized by auto)."""

from __future__ import annotations

import asyncio


class Limiter:
    """A semaphore whose size can change while requests are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.closed = False
        self._cond = asyncio.Condition()

    async def acquire(self) -> bool:
        """Wait for a slot and take it; False (no slot taken) once closed, also for those already waiting."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.closed or self.active < self.limit)
            if self.closed:
                return False
            self.active += 1
            return True

    async def release(self) -> None:
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    async def set_limit(self, limit: int) -> None:
        async with self._cond:
            self.limit = limit
            self._cond.notify_all()

    async def close(self) -> None:
        async with self._cond:
            self.closed = True
            self._cond.notify_all()
