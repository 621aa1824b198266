"""Versioned Qdrant collections: one index interface, an embedded (Qdrant Edge) and a server backend."""
