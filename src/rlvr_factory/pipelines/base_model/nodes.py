"""Base model: the embedded tiny model (built once per configuration) or a configured HF model."""

from __future__ import annotations

import pandas as pd

from rlvr_factory.domains import DomainConfig, get_domain
from rlvr_factory.models.tiny import build_or_load_base_model
from rlvr_factory.parameters import ModelConfig

EMBEDDED = "embedded"


def prepare_base_model(model: ModelConfig, domain: DomainConfig, validation_tasks: pd.DataFrame, test_tasks: pd.DataFrame) -> dict:
    """A reference to the base model: `model.name_or_path`, or the embedded one, built if needed.

    The embedded model is pre-trained on the domain's plain-text corpus, with every
    held-out prompt excluded from it.
    """
    if model.name_or_path != EMBEDDED:
        return {"name_or_path": str(model.name_or_path), "source": "configured"}
    embedded = model.embedded
    held_out = set(validation_tasks["prompt"]) | set(test_tasks["prompt"])
    corpus = get_domain(domain).pretraining_corpus(embedded.corpus_size, embedded.seed, held_out)
    path = build_or_load_base_model(
        embedded.cache_dir, embedded.architecture, corpus, embedded.pretrain, embedded.seed, embedded.copy_warmup,
    )
    return {"name_or_path": str(path), "source": EMBEDDED}
