"""Corpus handling: chunking documents into passages and incremental ingestion."""
