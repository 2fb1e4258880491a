"""turnlog's read side: pure folds over the event log, materialized with checkpoints."""
