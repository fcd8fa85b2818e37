"""The ingest wing: records -> validation and extraction -> embeddings -> one transaction per batch."""

from .ingestor import Ingestor, ramped
from .records import Prepared, RecordRules, coerce_record, prepare

__all__ = ["Ingestor", "Prepared", "RecordRules", "coerce_record", "prepare", "ramped"]
