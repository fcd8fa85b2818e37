"""The ingest wing: records -> validation and extraction -> embeddings -> one transaction per batch."""

from .ingestor import Ingestor, batched
from .records import Prepared, RecordRules, coerce_record, prepare

__all__ = ["Ingestor", "Prepared", "RecordRules", "batched", "coerce_record", "prepare"]
