"""Open-domain question answering with provenance: the served retriever finds passages, a span reader reads them,
and the answer is marginalised over passages (REALM, Guu et al. 2020, §3.4 open-QA fine-tuning; ORQA's reader)."""
