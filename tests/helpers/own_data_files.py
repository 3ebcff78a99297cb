"""Small files in the formats of a user's own data (docs/howto/own-data.md): sentence
classification as CSV, TSV or JSON lines (single sentences or pairs), tagging as JSON lines of
tokens and tags, and SQuAD JSON. The sentences come from two word lists, so a label follows
from the words and a tiny model can learn it; the tests write them into their own folders."""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path

from conftest import FIXTURE_DATA

GOOD = ["fine", "great", "superb", "moving", "lovely", "bright"]
BAD = ["dull", "weak", "tedious", "clumsy", "boring", "flat"]
NOUNS = ["film", "story", "cast", "score", "plot", "ending"]


def classification_rows(count: int, seed: int, pair: bool = False) -> list[dict]:
    """{"text", ["text_pair"], "label"}: label pos where the (last) sentence's adjective is
    from GOOD."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        good = i % 2 == 0
        text = f"the {rng.choice(NOUNS)} was {rng.choice(GOOD if good else BAD)}"
        row = {"text": text, "label": "pos" if good else "neg"}
        if pair:
            row = {"text": f"the {rng.choice(NOUNS)} , they said", "text_pair": text,
                   "label": row["label"]}
        rows.append(row)
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    """CSV, TSV (a header row) or JSON lines, by the file name's ending."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]),
                            delimiter="\t" if path.suffix == ".tsv" else ",")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())
    return path


def write_classification(folder: Path, suffix: str = ".csv", pair: bool = False,
                         train: int = 48, dev: int = 16) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return (write_rows(folder / f"train{suffix}", classification_rows(train, 0, pair)),
            write_rows(folder / f"dev{suffix}", classification_rows(dev, 1, pair)))


def tagged_rows(count: int, seed: int) -> list[dict]:
    """{"tokens", "tags"}: B-ADJ on the adjective, B-NOUN on the noun, O elsewhere."""
    rng = random.Random(seed)
    return [{"tokens": ["the", rng.choice(NOUNS), "was", rng.choice(GOOD + BAD)],
             "tags": ["O", "B-NOUN", "O", "B-ADJ"]} for _ in range(count)]


def write_tagging(folder: Path, train: int = 40, dev: int = 12) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return (write_rows(folder / "train.jsonl", tagged_rows(train, 0)),
            write_rows(folder / "dev.jsonl", tagged_rows(dev, 1)))


def squad_articles() -> list[dict]:
    """The articles of the SQuAD excerpt (tests/fixtures/data)."""
    return json.loads((FIXTURE_DATA / "squad_v1.1" / "dev-v1.1.json").read_text())["data"]


def write_squad_file(path: Path, articles: list[dict]) -> Path:
    path.write_text(json.dumps({"version": "1.1", "data": articles}))
    return path


def write_squad(folder: Path) -> tuple[Path, Path]:
    """The SQuAD excerpt's articles, the last two as dev.json and the rest as train.json."""
    folder.mkdir(parents=True, exist_ok=True)
    articles = squad_articles()
    return (write_squad_file(folder / "train.json", articles[:-2]),
            write_squad_file(folder / "dev.json", articles[-2:]))


def write_example(path: Path, tagging: bool = False) -> None:
    """One file of a user's own data, its format by its ending (.json: SQuAD)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        write_squad_file(path, squad_articles()[:2])
    elif tagging:
        write_rows(path, tagged_rows(12, 0))
    else:
        write_rows(path, classification_rows(12, 0))


# the files each preset reads by default from the working dir (conf/task/own_*.yaml)
PRESET_FILES = {"own_classification": write_classification, "own_tagging": write_tagging,
                "own_qa": write_squad}
