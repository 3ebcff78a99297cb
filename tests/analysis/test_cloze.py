"""analysis=cloze: pseudo-log-likelihood and mask scoring against hand computations on tiny
models (WordPiece and byte-level BPE), the readers on the real files (their excerpts on a plain
clone; the full sets' counts where they are present), the MLM-head check, and the probe
pipeline end to end on a checkpoint saved as `bertology pretrain` saves one."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch
from conftest import DATA_DIR, compose_config
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    BertModel,
    BertTokenizer,
    RobertaConfig,
    RobertaForMaskedLM,
)

from bertology.analysis import mlm_scoring as scoring
from bertology.data import cloze_suites as data
from bertology.errors import UserError
from bertology.pipelines import probe

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
SENTENCES = ["The chef cooks the soup.", "A farmer sings.", "The old wolves hide every onion "
             "in the brown house."]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_mlm(tokenizer, family: str = "bert"):
    torch.manual_seed(0)
    if family == "bert":
        return BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **TINY)).eval()
    config = RobertaConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           max_position_embeddings=130, type_vocab_size=1, **TINY)
    return RobertaForMaskedLM(config).eval()


@pytest.fixture(params=["bert", "roberta"])
def scorer(request, synthetic_tokenizer, bpe_tokenizer):
    tokenizer = synthetic_tokenizer if request.param == "bert" else bpe_tokenizer
    return scoring.Scorer(tiny_mlm(tokenizer, request.param), tokenizer, batch_size=5, top_k=5)


def hand_pll(model, tokenizer, sentence: str) -> float:
    """Salazar et al.'s PLL the slow way: one sentence, one masked position at a time."""
    ids = tokenizer(sentence)["input_ids"]
    total = 0.0
    for t in range(1, len(ids) - 1):  # every token but [CLS]/<s> and [SEP]/</s>
        masked = list(ids)
        masked[t] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([masked])).logits[0, t]  # (vocab,)
        total += logits.log_softmax(-1)[ids[t]].item()
    return total


def test_pll_equals_a_hand_computation(scorer):
    # batch_size=5 mixes sentences of different lengths (padding) within a batch
    plls = scoring.compute_pll(scorer, SENTENCES, "test")
    expected = [hand_pll(scorer.model, scorer.tokenizer, s) for s in SENTENCES]
    assert plls == pytest.approx(expected, abs=1e-4)
    assert all(p < 0 for p in plls)


def test_a_mask_replaces_every_sub_word_of_the_gap(scorer):
    tokenizer = scorer.tokenizer
    gap = data.Cloze("The chef ", " the soup.")
    ids, position = scoring.encode_cloze(scorer, gap, "xylophonists")  # many sub-words
    assert ids.count(tokenizer.mask_token_id) == 1 and ids[position] == tokenizer.mask_token_id
    word = "cooks"
    word_id = scoring.token_id(tokenizer, word)
    assert word_id is not None and scoring.token_id(tokenizer, "xylophonists") is None
    filled = ids[:position] + [word_id] + ids[position + 1:]
    assert filled == tokenizer("The chef cooks the soup.")["input_ids"]


def test_mask_scores_are_the_log_probabilities_and_top_k_at_the_mask(scorer):
    tokenizer = scorer.tokenizer
    inputs = [scoring.encode_cloze(scorer, data.Cloze(prefix, "."), "soup")
              for prefix in ("The chef cooks the ", "A ", "The farmers feed the old ")]
    wanted = [[scoring.token_id(tokenizer, w)] for w in ("soup", "chef", "cows")]
    tops, scores = scoring.compute_mask_scores(scorer, inputs, wanted, "test")
    special = list(set(tokenizer.all_special_ids))
    for (ids, position), top, want, score in zip(inputs, tops, wanted, scores):
        with torch.no_grad():
            log_probs = scorer.model(input_ids=torch.tensor([ids])).logits[0, position]
        log_probs = log_probs.log_softmax(-1)
        assert score == pytest.approx(log_probs[want].tolist(), abs=1e-5)
        log_probs[special] = -math.inf
        assert top.tolist() == log_probs.topk(5).indices.tolist()


# ---------------------------------------------------------------- readers on the real files


def test_blimp_reader():
    assert "adjunct_island" in data.blimp_paradigms(DATA_DIR, [])
    term, pairs = data.load_blimp(DATA_DIR, "adjunct_island")
    assert term == "island_effects"
    assert pairs[0] == data.MinimalPair("Who should Derek hug after shocking Richard?",
                                        "Who should Derek hug Richard after shocking?")
    with pytest.raises(UserError, match="no paradigm 'islands'"):
        data.blimp_paradigms(DATA_DIR, ["islands"])


def test_marvin_linzen_reader():
    simple = data.load_marvin_linzen(DATA_DIR, "simple_agrmt")
    assert set(simple) == {"sing_MS_MV", "plur_MS_MV"}
    assert simple["sing_MS_MV"][0] == data.MinimalPair("the author laughs", "the author laugh")


def test_colorless_green_reader():
    items = data.load_colorless_green(DATA_DIR)
    assert {item.kind for item in items} == {"original", "generated"}
    assert {item.pattern for item in items} == {"L__NOUN_VERB_VERB", "R__VERB_NOUN_CCONJ_VERB"}
    first = items[0]
    assert (first.correct, first.wrong, first.kind) == ("represents", "represent", "generated")
    text, (start, end) = first.cloze.fill("represents")
    assert text.startswith("An agreeable insight executed in fifty represents there add")
    assert text[start:end] == "represents" and "<eos>" not in text


def test_ettinger_readers():
    cprag = data.load_cprag(DATA_DIR)
    assert (cprag[0].expected, cprag[0].within, cprag[0].between) == ("chess", "monopoly",
                                                                      "football")
    assert cprag[0].cloze.fill("chess")[0].endswith("really good at chess.")
    role = data.load_role(DATA_DIR)
    assert role[0].expected == ("avoided", "hated", "read", "met")
    assert role[0].cloze.fill("x")[0] == "The librarian documented which journalist the " \
                                         "celebrities had x."
    simp, nat = data.load_neg(DATA_DIR, "SIMP"), data.load_neg(DATA_DIR, "NAT")
    assert simp[0].cloze("affirmative", "fish").fill("fish")[0] == "A trout is a fish."
    assert simp[2].cloze("negated", "insect").prefix == "An ant is not an "
    assert nat[0].cloze("negated", "dangerous").fill("dangerous")[0] == \
        "With proper equipment, scuba-diving isn't very dangerous."


def test_google_re_reader():
    fact = data.load_google_re(DATA_DIR, "place_of_birth")[0]
    assert fact.cloze.fill(fact.object)[0] == "Khatchig Mouradian was born in Lebanon ."
    born = data.load_google_re(DATA_DIR, "date_of_birth")[0]
    assert born.cloze.fill(born.object)[0] == "Peter F. Martin (born 1941)."


@pytest.mark.data("blimp")
def test_blimp_has_67_paradigms_of_1000_pairs():
    paradigms = data.blimp_paradigms(DATA_DIR, [])
    assert len(paradigms) == 67
    assert all(len(data.load_blimp(DATA_DIR, name)[1]) == 1000 for name in paradigms)


@pytest.mark.data("marvin_linzen_syneval", "colorless_green_agreement", "ettinger_diagnostics",
                  "lama")
def test_the_full_suites_have_their_published_counts():
    simple = data.load_marvin_linzen(DATA_DIR, "simple_agrmt")
    assert {c: len(p) for c, p in simple.items()} == {"sing_MS_MV": 70, "plur_MS_MV": 70}
    counts = {phenomenon: sum(len(pairs) for c in constructions
                              for pairs in data.load_marvin_linzen(DATA_DIR, c).values())
              for phenomenon, constructions in data.MARVIN_LINZEN.items()}
    assert counts == {"agreement": 47060, "reflexives": 7640}  # the data set's README.md table
    items = data.load_colorless_green(DATA_DIR)
    assert len(items) == 410 and sum(item.kind == "original" for item in items) == 41
    role = data.load_role(DATA_DIR)
    assert len(data.load_cprag(DATA_DIR)) == 34
    assert len(role) == 88 and len({item.item for item in role}) == 44
    assert (len(data.load_neg(DATA_DIR, "SIMP")), len(data.load_neg(DATA_DIR, "NAT"))) == (18, 16)
    counts = {r: len(data.load_google_re(DATA_DIR, r)) for r in data.GOOGLE_RE_TEMPLATES}
    assert counts == {"place_of_birth": 2937, "date_of_birth": 1825, "place_of_death": 766}


def test_missing_and_malformed_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="data set colorless_green_agreement: .*generated.tab "
                       "is missing; run `bertology data fetch colorless_green_agreement` or set "
                       "BERTOLOGY_DATA_DIR"):
        data.load_colorless_green(tmp_path)
    (tmp_path / "blimp").mkdir()
    (tmp_path / "blimp" / "broken.jsonl").write_text('{"sentence_good": "A b."}\n{oops\n')
    with pytest.raises(UserError, match=r"broken.jsonl:1: no field \['sentence_bad'\]"):
        data.load_blimp(tmp_path, "broken")
    (tmp_path / "lama" / "Google_RE").mkdir(parents=True)
    (tmp_path / "lama" / "Google_RE" / "place_of_death_test.jsonl").write_text("{oops\n")
    with pytest.raises(UserError, match="place_of_death_test.jsonl:1: not JSON"):
        data.load_google_re(tmp_path, "place_of_death")
    ettinger = tmp_path / "ettinger_diagnostics"
    ettinger.mkdir()
    (ettinger / "CPRAG-102.tsv").write_text("item\tcontext\n0\tHe plays\n")
    with pytest.raises(UserError, match=r"CPRAG-102.tsv: no column \['context_s1'\]"):
        data.load_cprag(tmp_path)
    header = (DATA_DIR / "ettinger_diagnostics" / "ROLE-88.tsv").read_text().splitlines()[0]
    (ettinger / "ROLE-88.tsv").write_text(f"{header}\n61-a\tThe cook had\n")
    with pytest.raises(UserError, match="ROLE-88.tsv:2: 2 fields, the header has 7"):
        data.load_role(tmp_path)


def test_sample_is_seeded_capped_and_in_file_order():
    items = list(range(50))
    drawn = data.sample_items(items, 10, "x", 0)
    assert len(drawn) == 10 and drawn == sorted(drawn)
    assert drawn == data.sample_items(items, 10, "x", 0)
    assert drawn != data.sample_items(items, 10, "x", 1)
    assert data.sample_items(items, 60, "x", 0) == items


# ---------------------------------------------------------------- the pipeline


def probe_config(model_dir, tmp_path, more=()):
    return compose_config("probe", [
        "analysis=cloze", "logger=none", f"model.name_or_path={model_dir}", "seeds=[0]",
        "max_train_sentences=10", "max_eval_sentences=10", f"paths.cache_dir={tmp_path}/cache",
        *more])


def test_a_checkpoint_without_mlm_head_is_a_one_line_error(tmp_path, synthetic_tokenizer):
    model_dir = tmp_path / "encoder"
    BertModel(BertConfig(vocab_size=len(synthetic_tokenizer), **TINY)).save_pretrained(model_dir)
    synthetic_tokenizer.save_pretrained(model_dir)
    with pytest.raises(UserError, match="has no masked-LM head") as error:
        probe.run(probe_config(model_dir, tmp_path), tmp_path / "run")
    assert "\n" not in str(error.value)


def cloze_vocabulary_tokenizer():
    """WordPiece trained on the synthetic corpus plus the cloze data's words, so that every
    suite has single-token targets (a synthetic-only vocabulary lacks 'Lebanon', 'chess')."""
    texts = [json.loads(line)["obj_label"] for r in data.GOOGLE_RE_TEMPLATES
             for line in (DATA_DIR / "lama" / "Google_RE" / f"{r}_test.jsonl").open()]
    for name in ("CPRAG-102", "ROLE-88", "NEG-136-SIMP", "NEG-136-NAT"):
        path = DATA_DIR / "ettinger_diagnostics" / f"{name}.tsv"
        texts += [" ".join(row) for row in csv.reader(path.open(), delimiter="\t")]
    with (DATA_DIR / "colorless_green_agreement" / "generated.tab").open() as handle:
        texts += [row["form"] for row in csv.DictReader(handle, delimiter="\t")]
    texts += SENTENCES
    return BertTokenizer().train_new_from_iterator([texts], vocab_size=6000,
                                                   show_progress=False)


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    """A BERT checkpoint as `bertology pretrain` leaves one in model/: BertForPreTraining's
    save_pretrained next to its tokenizer's."""
    tokenizer = cloze_vocabulary_tokenizer()
    model_dir = tmp_path_factory.mktemp("pretrain") / "model"
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(vocab_size=len(tokenizer), **TINY)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


@pytest.mark.slow
def test_cloze_end_to_end(pretrained_dir, tmp_path):
    more = ["analysis.cloze.max_items=2", "analysis.cloze.batch_size=64",
            "analysis.cloze.blimp_paradigms=[anaphor_gender_agreement,passive_1]"]
    metrics = probe.run(probe_config(pretrained_dir, tmp_path, more), tmp_path / "run")
    for key in ("cloze/blimp/accuracy", "cloze/blimp/anaphor_agreement/accuracy",
                "cloze/agreement/marvin_linzen/accuracy",
                "cloze/agreement/marvin_linzen/simple_agrmt/accuracy",
                "cloze/agreement/marvin_linzen_reflexives/accuracy",
                "cloze/agreement/colorless_green/accuracy",
                "cloze/ettinger/cprag/top1", "cloze/ettinger/cprag/top5",
                "cloze/ettinger/role/top1", "cloze/ettinger/role/top5",
                "cloze/ettinger/neg_simp/aff_accuracy", "cloze/ettinger/neg/sensitivity",
                "cloze/ettinger/neg/insensitivity", "cloze/lama/place_of_birth/p_at_1",
                "cloze/lama/date_of_birth/p_at_1", "cloze/lama/p_at_1"):
        assert key in metrics, key
    assert all(0.0 <= value <= 1.0 for value in metrics.values())
    assert metrics["cloze/ettinger/neg/sensitivity"] + metrics[
        "cloze/ettinger/neg/insensitivity"] == pytest.approx(metrics[
            "cloze/ettinger/neg/aff_accuracy"])
    with (tmp_path / "run" / "tables" / "cloze_synthetic_pos.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["suite", "test", "n", "n_skipped", "metric", "value"]
    blimp = [r for r in rows if r["test"].startswith("paradigm/")]
    assert [(r["test"], r["n"]) for r in blimp] == [("paradigm/anaphor_gender_agreement", "2"),
                                                    ("paradigm/passive_1", "2")]
    lama = {r["test"]: r for r in rows if r["suite"] == "lama" and r["test"]}
    assert all(int(r["n"]) == 2 for r in lama.values())  # max_items facts per relation
    assert (tmp_path / "run" / "plots" / "cloze_synthetic_pos.png").stat().st_size > 0
