"""A generated corpus of made-up biographies whose facts recur across documents (salient spans with support)."""

from __future__ import annotations

import random

from ferret.core.realm.masking import CorpusPassage

_FIRST = ["Alma", "Bruno", "Clara", "Dario", "Elena", "Felix", "Greta", "Hugo", "Irene", "Jonas", "Katya", "Lucas"]
_LAST = ["Varga", "Moreau", "Lindqvist", "Okafor", "Tanaka", "Ferreira", "Novak", "Brennan", "Castillo", "Haddad"]
_CITIES = ["Lisbon", "Tallinn", "Porto", "Krakow", "Ghent", "Bergen", "Trieste", "Valencia"]
_FIELDS = ["botany", "geology", "astronomy", "linguistics", "chemistry", "economics"]


def tiny_biographies(people: int = 12, seed: int = 13) -> list[dict[str, str]]:
    """Two documents per person (a biography and a prize notice), sharing names, cities and years."""
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


def tiny_passages(people: int = 12, seed: int = 13) -> list[CorpusPassage]:
    return [
        CorpusPassage(i + 1, i + 1, f"{d['title']}\n{d['text']}") for i, d in enumerate(tiny_biographies(people, seed))
    ]
