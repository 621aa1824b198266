"""A SQL table or view as a source (SQLAlchemy Core): rows become documents, an updated_at watermark syncs them."""
