"""Retrieval evaluation on BEIR-layout datasets: metrics, a BM25 baseline and side-by-side runs."""
