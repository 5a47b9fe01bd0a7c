"""A Kedro dataset for a policy saved as an ordinary Hugging Face model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from rlvr_factory.models.policy import Policy, freeze, load_policy, save_policy


class PolicyDataset(AbstractDataset[Policy, Policy]):
    """Saves with `save_pretrained` (model and tokenizer) and loads with the Auto classes, by default in the
    dtype it was saved in, so a policy trained in bfloat16 (`model.dtype`) trains and evaluates on in it.

    With `with_optimizer`, the optimizer state is saved and restored too, so a policy
    saved mid-training resumes with its optimizer moments. With `frozen`, the policy loads
    with every weight frozen (a reference model that is never trained).
    """

    def __init__(
        self, path: str, device: str = "auto", dtype: str = "auto", with_optimizer: bool = False,
        frozen: bool = False, metadata: dict[str, Any] | None = None,
    ):
        self._path = Path(path)
        self._device, self._dtype = device, dtype
        self._with_optimizer = with_optimizer
        self._frozen = frozen
        self.metadata = metadata

    def load(self) -> Policy:
        policy = load_policy(self._path, self._device, self._dtype, self._with_optimizer)
        if self._frozen:
            freeze(policy.model)
        return policy

    def save(self, data: Policy) -> None:
        save_policy(data, self._path, with_optimizer=self._with_optimizer)

    def _exists(self) -> bool:
        return (self._path / "config.json").exists()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "device": self._device, "dtype": self._dtype}
