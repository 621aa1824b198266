"""REALM retrieval-augmented pre-training (Guu et al. 2020): the unsupervised half of training a retriever.

masking (salient spans) → retriever p(z|x) + reader p(y|z,x) → objective (marginal over the top k + null) →
asynchronous index refresh through internal versioned collections → retrieval utility → WiSE-FT → model version.
"""
