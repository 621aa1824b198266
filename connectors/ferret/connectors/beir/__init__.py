"""BEIR benchmark datasets: the corpus as a source, and loaders for queries and relevance judgements."""

from ferret.connectors.beir.connector import BeirConnector
from ferret.core.eval.beir import CorpusRecord, iter_corpus, load_qrels, load_queries

__all__ = ["BeirConnector", "CorpusRecord", "iter_corpus", "load_qrels", "load_queries"]
