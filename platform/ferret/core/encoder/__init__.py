"""Dual encoders: the sentence-transformers wrapper and the model registry."""
