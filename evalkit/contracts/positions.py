"""Teacher-forced token positions: what a server's ``prompt_logprobs`` said about one scored text (re-exported by
:mod:`evalkit.contracts`). A ``logprobs`` task (the built-in ``numerics``) records one :class:`PromptPositions`
per request in the run dir's ``positions.bin`` (:mod:`evalkit.store.positions_file`); the gate and the report compare
two runs' positions text by text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


@dataclass(frozen=True, eq=False)
class PromptPositions:
    """One text as a server scored it, position by position (``n`` tokens, top ``k``, ``m`` continuation tokens).

    Position 0 has no logprob (nothing precedes it): its ``token_logprobs`` entry is NaN and its ``top_ids`` row
    is all -1. A position with fewer than ``k`` alternatives pads ``top_ids`` with -1 and ``top_logprobs`` with
    NaN. ``top_ids``/``top_logprobs`` are in the server's rank order (rank 1 first)."""

    key: str  # the request's key (SampleRecord.key)
    task: str
    doc_id: int
    sample_index: int  # 0: the main pass; 1: the noise-floor pass (the same text again, in another batch order)
    token_ids: npt.NDArray[np.int32]  # [n] the text's tokens as the server tokenised it
    token_logprobs: npt.NDArray[np.float32]  # [n] the logprob of each actual token given the ones before it
    top_ids: npt.NDArray[np.int32]  # [n, k]
    top_logprobs: npt.NDArray[np.float32]  # [n, k]
    tokens: tuple[str, ...]  # [n] each token's text as the server decoded it (for the report)
    continuation_ids: npt.NDArray[np.int32]  # [m] the greedy continuation the server generated after the text

    @property
    def n(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def k(self) -> int:
        return int(self.top_ids.shape[1]) if self.top_ids.ndim == 2 else 0
