"""Fixtures of the REALM tests: a generated corpus of made-up biographies whose facts recur across documents, so
salient spans have support in another document (test modules cannot import a conftest, so helpers are fixtures)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ferret.core.realm.masking import CorpusPassage

_FIRST = ["Alma", "Bruno", "Clara", "Dario", "Elena", "Felix", "Greta", "Hugo", "Irene", "Jonas", "Katya", "Lucas"]
_LAST = ["Varga", "Moreau", "Lindqvist", "Okafor", "Tanaka", "Ferreira", "Novak", "Brennan", "Castillo", "Haddad"]
_CITIES = ["Lisbon", "Tallinn", "Porto", "Krakow", "Ghent", "Bergen", "Trieste", "Valencia"]
_FIELDS = ["botany", "geology", "astronomy", "linguistics", "chemistry", "economics"]


def biographies(people: int = 12, seed: int = 13) -> list[dict[str, str]]:
    """Two BEIR-style documents per person (a biography and a prize notice) sharing names, cities and years."""
    rng = random.Random(seed)
    documents = []
    for i in range(people):
        name = f"{_FIRST[i % len(_FIRST)]} {_LAST[(i * 7) % len(_LAST)]}"
        city, field, year = rng.choice(_CITIES), rng.choice(_FIELDS), rng.randint(1850, 1990)
        prize = year + rng.randint(25, 45)
        documents.append(
            {
                "_id": f"bio-{i}",
                "title": name,
                "text": (
                    f"{name} was born in {city} in {year}. {name} studied {field} at the university of {city}. "
                    f"In {prize} {name} received the Halvorsen Medal for work on {field}."
                ),
            }
        )
        documents.append(
            {
                "_id": f"prize-{i}",
                "title": f"Halvorsen Medal {prize}",
                "text": (
                    f"The Halvorsen Medal of {prize} went to {name}, a scholar of {field}. "
                    f"The ceremony honoured research begun in {city} decades earlier."
                ),
            }
        )
    return documents


def passages_of(documents: list[dict[str, str]]) -> list[CorpusPassage]:
    return [CorpusPassage(i + 1, i + 1, f"{d['title']}\n{d['text']}") for i, d in enumerate(documents)]


@pytest.fixture
def tiny_biographies() -> Callable[..., list[dict[str, str]]]:
    return biographies


@pytest.fixture
def tiny_passages() -> Callable[..., list[CorpusPassage]]:
    return lambda people=12, seed=13: passages_of(biographies(people, seed))
