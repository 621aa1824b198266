"""Query-time search over the active (or a chosen) index version of a corpus."""
