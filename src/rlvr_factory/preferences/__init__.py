"""Preference data: the `prompt, chosen, rejected` contract, its formats, sources and curation."""

from rlvr_factory.preferences.contract import PAIR_COLUMNS, PreferencePair, pairs_from_frame, pairs_to_frame
from rlvr_factory.preferences.curation import PAIR_QUARANTINE_COLUMNS, CuratedPairs, curate_pairs, pair_quarantine_frame
from rlvr_factory.preferences.formats import FORMATS, record_to_pair
from rlvr_factory.preferences.sources import loaded_rows, raw_pair_rows
from rlvr_factory.preferences.synthetic import SyntheticPairs, synthetic_rows

__all__ = [
    "FORMATS", "PAIR_COLUMNS", "PAIR_QUARANTINE_COLUMNS", "CuratedPairs", "PreferencePair", "SyntheticPairs",
    "curate_pairs", "loaded_rows", "pair_quarantine_frame", "pairs_from_frame", "pairs_to_frame", "raw_pair_rows",
    "record_to_pair", "synthetic_rows",
]
