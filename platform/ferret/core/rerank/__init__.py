"""Cross-encoder reranking of the first stage's top documents (Promptagator++, Dai et al. 2022 §3.4)."""
