"""The REALM objective on the real MiniLM retriever and reader: the marginal, the null document, the gradients."""

from __future__ import annotations

import math

import pytest
import torch

from ferret.core.encoder.registry import base_model_path
from ferret.core.realm.masking import MaskedSentence
from ferret.core.realm.reader import KnowledgeAugmentedEncoder
from ferret.core.realm.retriever import KnowledgeRetriever
from ferret.core.realm.utility import marginal_log_likelihood, realm_loss, retrieval_utility


def test_marginal_is_log_sum_of_prior_times_likelihood() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0]])  # two passages and the null document
    reader = torch.tensor([[-1.0, -3.0, -5.0]])
    prior = torch.softmax(logits, dim=-1)[0]
    expected = math.log(sum(float(p) * math.exp(float(r)) for p, r in zip(prior, reader[0], strict=True)))
    assert float(marginal_log_likelihood(logits, reader)[0]) == pytest.approx(expected, rel=1e-5)
    assert float(realm_loss(logits, reader, torch.tensor([2.0]))) == pytest.approx(-expected / 2, rel=1e-5)
    assert float(retrieval_utility(reader, torch.tensor([2.0]))[0]) == pytest.approx((-1.0 + 5.0) / 2)


def test_gradients_reach_the_retriever_and_the_reader() -> None:
    """p(z|x) is recomputed with the current parameters, so the marginal's gradient flows into both towers."""
    torch.manual_seed(0)
    retriever = KnowledgeRetriever.load(base_model_path(), device="cpu", max_passage_tokens=48)
    reader = KnowledgeAugmentedEncoder.build(base_model_path(), device="cpu")
    decoder = reader.model.get_output_embeddings().weight
    assert decoder.data_ptr() == reader.model.get_input_embeddings().weight.data_ptr()  # tied to word embeddings
    sentence = "Marie Curie was born in Warsaw in 1867."
    example = MaskedSentence(1, 1, sentence, ((24, 30),))  # "Warsaw"
    (masked,) = reader.encode_sentences([example])
    assert [reader.tokenizer.decode([token]) for _, token in masked.targets] == ["warsaw"]
    assert masked.ids.count(reader.tokenizer.mask_token_id) == len(masked.targets)
    passages = [["Warsaw is the capital of Poland, where Curie grew up.", "Penguins cannot fly."]]
    logits = retriever.logits([example.masked_text], passages)
    assert logits.shape == (1, 3) and logits[0, 2].item() == 0.0  # the null document's logit
    reader_ll = reader.log_likelihood([masked], [[*passages[0], None]])
    assert reader_ll.shape == (1, 3) and bool((reader_ll < 0).all())
    realm_loss(logits, reader_ll, torch.tensor([float(len(masked.targets))])).backward()
    query_grad = sum(float(p.grad.abs().sum()) for p in retriever.parameters() if p.grad is not None)
    reader_grad = sum(float(p.grad.abs().sum()) for p in reader.model.parameters() if p.grad is not None)
    assert query_grad > 0 and reader_grad > 0


def test_frozen_document_tower_gets_no_gradient() -> None:
    retriever = KnowledgeRetriever.load(base_model_path(), device="cpu", freeze_doc_tower=True, max_passage_tokens=32)
    logits = retriever.logits(["who was born in [MASK]?"], [["Curie was born in Warsaw."]])
    logits[0, 0].backward()
    assert all(p.grad is None for p in retriever.doc_tower.parameters())
    assert any(p.grad is not None for p in retriever.query_tower.parameters())
