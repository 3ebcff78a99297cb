"""Readers for the cloze suites' data under the data root (formats: each folder's README.md).

- blimp/<paradigm>.jsonl: Warstadt et al. (2020), minimal pairs (sentence_good, sentence_bad).
- marvin_linzen_syneval/<construction>.tsv: Marvin & Linzen (2018), minimal pairs per
  condition (sentence_good, sentence_bad).
- colorless_green_agreement/generated.tab: Gulordava et al. (2018), a correct and a wrong verb
  form per sentence; the verb is word len_prefix of `sent`.
- ettinger_diagnostics/{CPRAG-102,ROLE-88,NEG-136-SIMP,NEG-136-NAT}.tsv: Ettinger (2020).
- lama/Google_RE/<relation>_test.jsonl: Petroni et al. (2019), (sub_label, obj_label) facts.

A masked word is a `Cloze`: the text before it and after it, so that any filler (the correct
form, a candidate) can be put in its place and its sub-words replaced by one mask.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from bertology.config.data_checks import data_fix
from bertology.data.corpora import parse_json_lines
from bertology.data.tasks import read_lines
from bertology.errors import UserError, require

# Marvin & Linzen (2018) Table 1's constructions, by phenomenon; their NPI files hold triples
# (one licensed, two unlicensed sentences) that measure licensing, not agreement, and are left out.
MARVIN_LINZEN = {
    "agreement": ("simple_agrmt", "sent_comp", "vp_coord", "long_vp_coord", "prep_anim",
                  "prep_inanim", "subj_rel", "obj_rel_across_anim", "obj_rel_across_inanim",
                  "obj_rel_no_comp_across_anim", "obj_rel_no_comp_across_inanim",
                  "obj_rel_within_anim", "obj_rel_within_inanim",
                  "obj_rel_no_comp_within_anim", "obj_rel_no_comp_within_inanim"),
    "reflexives": ("simple_reflexives", "reflexive_sent_comp", "reflexives_across"),
}

# LAMA's Google-RE templates (facebookresearch/LAMA, scripts/run_experiments.py,
# get_GoogleRE_parameters); lama/relations.jsonl holds the T-REx templates only.
GOOGLE_RE_TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str


@dataclass(frozen=True)
class Cloze:
    """A sentence with one word masked: prefix + <word> + suffix."""

    prefix: str
    suffix: str

    def fill(self, word: str) -> tuple[str, tuple[int, int]]:
        """The sentence with `word` in the gap, and the gap's character span."""
        return self.prefix + word + self.suffix, (len(self.prefix), len(self.prefix) + len(word))


@dataclass(frozen=True)
class AgreementItem:
    """Goldberg (2019) on Gulordava et al. (2018): the verb masked, two forms compared."""

    cloze: Cloze
    correct: str
    wrong: str
    pattern: str
    kind: str  # original (a treebank sentence) | generated (its "colorless green" variant)


@dataclass(frozen=True)
class CpragItem:
    cloze: Cloze
    expected: str  # the highest-cloze completion
    within: str  # a same-category word of roughly zero cloze
    between: str  # a broader-category word of roughly zero cloze


@dataclass(frozen=True)
class RoleItem:
    item: str  # "61": the pair's number
    condition: str  # a | b: b reverses a's roles
    cloze: Cloze
    expected: tuple[str, ...]  # the completions people gave most
    target: str  # the word whose probability the role reversal should lower


@dataclass(frozen=True)
class NegItem:
    item: str
    affirmative: str  # context before the masked word
    negated: str
    true_affirmative: str  # true after the affirmative context, false after the negated one
    true_negated: str
    article: bool  # NEG-SIMP: "a"/"an" before the gap, chosen from the word that fills it

    def cloze(self, polarity: str, word: str) -> Cloze:
        """Ettinger's (2020) input: the context, for SIMP the article that suits `word`, the
        mask, and a final period (lm-diagnostics proc_datasets.py, access_model.py)."""
        context = self.affirmative if polarity == "affirmative" else self.negated
        if self.article:
            context = f"{context} {'an' if word[:1].lower() in 'aeiou' else 'a'}"
        return Cloze(context.strip() + " ", ".")


@dataclass(frozen=True)
class LamaFact:
    cloze: Cloze
    subject: str
    object: str


# ---------------------------------------------------------------- file formats


def read_jsonl(path: Path, keys: tuple[str, ...]) -> list[dict]:
    """One JSON object per line, each with `keys`."""
    fix = f"restore the file (see {path.parent}/README.md)"
    return [record for _, record in parse_json_lines(path, read_lines(path), fix, keys)]


def read_tsv(path: Path, columns: tuple[str, ...], quoting: int = csv.QUOTE_NONE) -> list[dict]:
    """A TSV with a header row that names at least `columns`; every row as long as it."""
    rows = list(csv.reader(read_lines(path), delimiter="\t", quoting=quoting))
    header = [name.strip() for name in rows[0]]
    missing = [c for c in columns if c not in header]
    require(not missing, f"{path}: no column {missing[:1]} (header: {', '.join(header)}); "
            f"restore the file (see {path.parent}/README.md)")
    records = []
    for number, row in enumerate(rows[1:], start=2):
        if not any(field.strip() for field in row):
            continue
        require(len(row) == len(header), f"{path}:{number}: {len(row)} fields, the header has "
                f"{len(header)}; restore the file (see {path.parent}/README.md)")
        records.append({name: field.strip() for name, field in zip(header, row)})
    return records


def sample_items(items: list, limit: int, key: str, seed: int) -> list:
    """At most `limit` items: a seeded draw (random.Random(f"{seed}/{key}")), in file order.
    Seeded, not the first N: Marvin & Linzen's files list a condition's pairs template by
    template, so the first N would all share a few nouns."""
    if len(items) <= limit:
        return items
    keep = sorted(random.Random(f"{seed}/{key}").sample(range(len(items)), limit))
    return [items[i] for i in keep]


# ---------------------------------------------------------------- BLiMP, Marvin & Linzen


def blimp_paradigms(data_dir: Path, wanted: list[str]) -> list[str]:
    """The paradigms to run: `wanted`, or every blimp/*.jsonl."""
    folder = data_dir / "blimp"
    found = sorted(path.stem for path in folder.glob("*.jsonl") if path.is_file())
    absent = [folder / f"{name}.jsonl" for name in wanted if name not in found]
    where = absent[0] if absent else folder
    require(found or not absent, f"{where} "
            f"{'is a folder, not a file' if where.is_dir() else 'does not exist'}; "
            f"{data_fix(folder, data_dir)}")
    require(found, f"{folder} holds no *.jsonl; {data_fix(folder, data_dir)}")
    unknown = [name for name in wanted if name not in found]
    if unknown:
        raise UserError(f"analysis.cloze.blimp_paradigms: no paradigm {unknown[0]!r} in "
                        f"{folder}; use file names without .jsonl, e.g. {found[0]}")
    return wanted or found


def load_blimp(data_dir: Path, paradigm: str) -> tuple[str, list[MinimalPair]]:
    """One paradigm's phenomenon (linguistics_term) and its pairs."""
    records = read_jsonl(data_dir / "blimp" / f"{paradigm}.jsonl",
                         ("sentence_good", "sentence_bad", "linguistics_term"))
    pairs = [MinimalPair(r["sentence_good"], r["sentence_bad"]) for r in records]
    return records[0]["linguistics_term"], pairs


def load_marvin_linzen(data_dir: Path, construction: str) -> dict[str, list[MinimalPair]]:
    """condition -> its pairs, in file order."""
    path = data_dir / "marvin_linzen_syneval" / f"{construction}.tsv"
    by_condition: dict[str, list[MinimalPair]] = {}
    for row in read_tsv(path, ("condition", "sentence_good", "sentence_bad")):
        pair = MinimalPair(row["sentence_good"], row["sentence_bad"])
        by_condition.setdefault(row["condition"], []).append(pair)
    return by_condition


# ---------------------------------------------------------------- Gulordava et al. (Goldberg)


def load_colorless_green(data_dir: Path) -> list[AgreementItem]:
    """generated.tab's rows come in (correct, wrong) pairs of one sentence; as Goldberg's
    bert-syntax read_gulordava: drop <eos>, mask word len_prefix of the whole sentence (the
    right context stays: BERT sees both sides)."""
    path = data_dir / "colorless_green_agreement" / "generated.tab"
    rows = read_tsv(path, ("pattern", "form", "class", "type", "len_prefix", "sent"),
                    quoting=csv.QUOTE_MINIMAL)  # `sent` is quoted where it holds a quote
    require(len(rows) % 2 == 0, f"{path}: {len(rows)} rows, expected (correct, wrong) pairs; "
            f"restore the file (see {path.parent}/README.md)")
    items = []
    for correct, wrong in zip(rows[::2], rows[1::2]):
        require(correct["class"] == "correct" and wrong["class"] == "wrong"
                and correct["sent"] == wrong["sent"], f"{path}: rows for {correct['sent'][:40]!r}"
                " are not a (correct, wrong) pair; restore the file")
        words = [w for w in correct["sent"].split() if w != "<eos>"]
        verb = int(correct["len_prefix"])
        require(0 < verb < len(words), f"{path}: len_prefix={verb} is outside the sentence")
        cloze = Cloze(" ".join(words[:verb]) + " ", "".join(f" {w}" for w in words[verb + 1:]))
        items.append(AgreementItem(cloze, correct["form"], wrong["form"], correct["pattern"],
                                   correct["type"]))
    return items


# ---------------------------------------------------------------- Ettinger (2020)


def ettinger_path(data_dir: Path, name: str) -> Path:
    return data_dir / "ettinger_diagnostics" / f"{name}.tsv"


def final_word_cloze(context: str) -> Cloze:
    """Ettinger's protocol: the target is the last word, predicted at a mask before a period."""
    return Cloze(context.strip() + " ", ".")


def load_cprag(data_dir: Path) -> list[CpragItem]:
    rows = read_tsv(ettinger_path(data_dir, "CPRAG-102"), ("context_s1", "context_s2", "expected",
                                                           "within_category", "between_category"))
    return [CpragItem(final_word_cloze(f"{r['context_s1']} {r['context_s2']}"), r["expected"],
                      r["within_category"], r["between_category"]) for r in rows]


def load_role(data_dir: Path) -> list[RoleItem]:
    path = ettinger_path(data_dir, "ROLE-88")
    items = []
    for row in read_tsv(path, ("item", "context", "expected", "target")):
        number, _, condition = row["item"].partition("-")
        require(condition in ("a", "b"), f"{path}: item {row['item']!r} is not <n>-a or <n>-b; "
                "restore the file")
        # lm-diagnostics process_role: each expected completion's first word, the target's too
        expected = tuple(e.split()[0] for e in row["expected"].split("|") if e.strip())
        items.append(RoleItem(number, condition, final_word_cloze(row["context"]), expected,
                              row["target"].split()[0]))
    return items


def load_neg(data_dir: Path, variant: str) -> list[NegItem]:
    """variant SIMP (the article is left to the filler) or NAT."""
    columns = ("item", "context_aff", "context_neg", "target_aff", "target_neg")
    rows = read_tsv(ettinger_path(data_dir, f"NEG-136-{variant}"), columns)
    article = variant == "SIMP"

    def context(text: str) -> str:  # SIMP: "A trout is (a|an)" -> "A trout is"
        return text.replace("(a|an)", "").strip() if article else text

    return [NegItem(r["item"], context(r["context_aff"]), context(r["context_neg"]),
                    r["target_aff"], r["target_neg"], article) for r in rows]


# ---------------------------------------------------------------- LAMA Google-RE


def load_google_re(data_dir: Path, relation: str) -> list[LamaFact]:
    """The relation's facts as its template with [X] = subject and [Y] the gap."""
    path = data_dir / "lama" / "Google_RE" / f"{relation}_test.jsonl"
    before, after = GOOGLE_RE_TEMPLATES[relation].split("[Y]")
    facts = []
    for record in read_jsonl(path, ("sub_label", "obj_label")):
        subject = record["sub_label"]
        cloze = Cloze(before.replace("[X]", subject), after.replace("[X]", subject))
        facts.append(LamaFact(cloze, subject, record["obj_label"]))
    return facts
