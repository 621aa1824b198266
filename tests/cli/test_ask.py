"""``ferret reader train`` and ``ferret ask`` on a fresh FERRET_HOME: a span reader fine-tuned on a tiny SQuAD-style
set, then questions answered from an indexed corpus with the passages that support the answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.core.encoder.dual_encoder import DualEncoder

runner = CliRunner()

PEOPLE = [
    ("Alma Varga", "Lisbon", "botany", "1901"),
    ("Bruno Moreau", "Tallinn", "geology", "1911"),
    ("Clara Lindqvist", "Porto", "astronomy", "1923"),
    ("Dario Okafor", "Krakow", "linguistics", "1937"),
    ("Elena Tanaka", "Ghent", "chemistry", "1948"),
    ("Felix Novak", "Bergen", "economics", "1952"),
]


def squad_folder(root: Path) -> Path:
    """A BEIR folder whose queries carry SQuAD answers (the shape of ../shared/datasets/squad-v1.1-dev)."""
    root.mkdir(parents=True)
    corpus, queries = [], []
    for i, (name, city, field, year) in enumerate(PEOPLE):
        text = f"{name} was born in {city} in {year}. {name} studied {field} at the university of {city}."
        corpus.append({"_id": f"p{i}", "title": name, "text": text})
        for j, (question, answer) in enumerate(
            [(f"Where was {name} born?", city), (f"What did {name} study?", field), (f"When was {name} born?", year)]
        ):
            metadata = {"answers": [answer], "answer_starts": [text.index(answer)], "gold_paragraph": f"p{i}"}
            queries.append({"_id": f"q{i}-{j}", "text": question, "metadata": metadata})
    (root / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries))
    return root


@pytest.mark.slow
def test_train_a_reader_and_ask_with_provenance(ferret_home: Path, encoder: DualEncoder, tmp_path: Path) -> None:
    dataset = squad_folder(tmp_path / "people")
    assert runner.invoke(app, ["ingest", "--corpus", "people", "--beir", str(dataset)]).exit_code == 0
    assert runner.invoke(app, ["index", "build", "--corpus", "people", "--promote"]).exit_code == 0
    no_reader = runner.invoke(app, ["ask", "Where was Alma Varga born?", "--corpus", "people"])
    assert no_reader.exit_code == 1 and "No span reader is trained yet" in " ".join(no_reader.output.split())

    trained = runner.invoke(
        app, ["reader", "train", "--dataset", str(dataset), "--name", "tiny", "--steps", "40", "--batch-size", "8"]
    )
    assert trained.exit_code == 0, trained.output
    assert "reader tiny: 18 pairs, 40 steps" in trained.stdout
    again = runner.invoke(app, ["reader", "train", "--dataset", str(dataset), "--name", "tiny", "--steps", "1"])
    assert again.exit_code == 1 and "Reader 'tiny' already exists" in " ".join(again.output.split())

    asked = runner.invoke(app, ["ask", "Where was Clara Lindqvist born?", "--corpus", "people", "-k", "3", "--json"])
    assert asked.exit_code == 0, asked.output
    result = json.loads(asked.stdout)
    passages = result["passages"]
    assert len(passages) == 3 and passages[0]["title"] == "Clara Lindqvist"  # the served retriever's top passage
    assert math.isclose(sum(p["retrieval_probability"] for p in passages), 1.0, rel_tol=1e-6)
    best = result["answers"][0]
    assert best["text"] == "Porto"  # learnt from 40 steps on these very pairs
    assert best["provenance"][0]["document"] == "p2" and "Porto" in best["provenance"][0]["context"]
    read = {p["document"] for p in passages}
    assert all(p["document"] in read for p in best["provenance"])
    assert 0.0 < best["probability"] <= 1.0

    shown = runner.invoke(app, ["ask", "What did Felix Novak study?", "--corpus", "people", "-k", "2"])
    assert shown.exit_code == 0, shown.output
    assert "supported by" in shown.stdout and "p5" in shown.stdout and "passages read:" in shown.stdout

    bad_k = runner.invoke(app, ["ask", "Who?", "--corpus", "people", "-k", "0"])
    assert bad_k.exit_code == 1 and "k must be between 1 and 50 passages" in bad_k.output
    missing = runner.invoke(app, ["reader", "train", "--dataset", str(tmp_path / "nowhere"), "--name", "x"])
    assert missing.exit_code == 1
    assert "is neither a SQuAD v1.1 JSON file nor a BEIR folder" in " ".join(missing.output.split())


@pytest.mark.parametrize(
    ("arguments", "sentence"),
    [
        (["ask", "Who?", "--corpus", "nowhere"], "Corpus 'nowhere' does not exist"),
        (["ask", "  ", "--corpus", "nowhere"], "The question is empty; type a question to answer."),
        (["ask", "Who?", "--corpus", "nowhere", "--answers", "0"], "--answers must be at least 1."),
        (["reader", "train", "--dataset", "nowhere", "--batch-size", "0"], "--batch-size must be at least 1."),
        (["reader", "train", "--dataset", "nowhere", "--steps", "-1"], "--steps must be at least 1."),
        (["reader", "train", "--dataset", "nowhere", "--max-questions", "0"], "--max-questions must be at least 1."),
        (["reader", "train", "--dataset", "nowhere", "--learning-rate", "-1"], "--learning-rate must be above 0"),
    ],
)
def test_what_the_user_can_fix_is_said_first(ferret_home: Path, arguments: list[str], sentence: str) -> None:
    """Said before a reader is looked for or loaded: an unknown corpus or an empty question was answered "No span
    reader is trained yet" (train one, minutes, to learn the next mistake); a zero batch size or a negative learning
    rate ended in a traceback after the dataset and the model had loaded."""
    result = runner.invoke(app, arguments)
    assert result.exit_code == 1, result.output
    assert sentence in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_an_answer_is_printed_as_the_documents_words_not_markup() -> None:
    """A title, an id, a span or a passage that looks like rich markup: "[/b]" raised MarkupError (a traceback after
    the answer was found) and "[draft]" vanished from the table."""
    from ferret.cli.ask_commands import print_answer
    from ferret.cli.render import console
    from ferret.core.qa.answering import Answer, AskResult, Provenance, RetrievedPassage

    passage = RetrievedPassage(7, "leave [v2].md", "[draft] Leave policy", "Parental leave is [/b] 20 days.", 0.9, 1.0)
    where = Provenance(7, passage.document, passage.title, 1.0, 0.8, 19, 26, "Parental leave is [/b] 20 days.")
    result = AskResult("How long?", [Answer("[/b] 20 days", 0.8, [where]), Answer("[red]", 0.1)], [passage])
    with console.capture() as captured:
        print_answer(result)
    printed = " ".join(captured.get().split())
    for words in ("[/b] 20 days", "leave [v2].md", "[draft] Leave policy", "other answers: [red] (0.100)"):
        assert words in printed, printed
