"""What a population's verdicts are about: the recipe its members were pretrained with and the
selection that made them members. A verdict "across 18 pretrained checkpoints" hides that 25
seeds were drawn and 7 that never left the unigram floor (their held-out MLM accuracy at or below
always predicting the most frequent masked token) were set aside; the scope says both, from the
members table a population run writes (members.write_members_table: every member drawn, its
recipe and whether it learned).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

MEMBERS_TABLE = "members"  # tables/members.csv of a population's report


@dataclass(frozen=True)
class Selection:
    """The members drawn: each one's row of the members table (strings, as the CSV holds)."""

    rows: tuple[dict[str, str], ...]

    @classmethod
    def read(cls, path: Path) -> Selection | None:
        if not path.is_file():
            return None
        with path.open(newline="") as handle:
            return cls(tuple(csv.DictReader(handle)))

    @property
    def learned(self) -> list[dict[str, str]]:
        return [r for r in self.rows if r.get("learned") == "True"]

    @property
    def set_aside(self) -> list[str]:
        """The members drawn that did not learn, or whose pretraining did not finish."""
        return [r["member"] for r in self.rows if r.get("learned") != "True"]

    def recipe(self) -> str:
        """"6-layer, 256-wide BERTs that saw 1.4M tokens (4.0e13 FLOPs) each, held-out MLM
        accuracy 0.066–0.105": what the learned members share, from their rows."""
        learned = self.learned
        first = learned[0] if learned else {}
        shape = (f"{first['layers']}-layer, {first['hidden']}-wide BERTs"
                 if first.get("layers") and first.get("hidden") else "BERTs")
        tokens = [float(r["tokens"]) for r in learned if r.get("tokens")]
        flops = [float(r["flops"]) for r in learned if r.get("flops")]
        budget = (f" that saw {sum(tokens) / len(tokens) / 1e6:.1f}M tokens"
                  + (f" ({sum(flops) / len(flops):.1e} FLOPs)" if flops else "") + " each"
                  if tokens else "")
        accuracy = [float(r["mlm_accuracy"]) for r in learned if r.get("mlm_accuracy")]
        reached = (f", held-out MLM accuracy {min(accuracy):.3f}–{max(accuracy):.3f}"
                   if accuracy else "")
        return f"{shape}{budget}{reached}"

    @property
    def external(self) -> bool:
        """Checkpoints pretrained elsewhere (`--checkpoints`): read as they are, none drawn by
        this run and none set aside for its pretraining."""
        return bool(self.rows) and "sha" in self.rows[0]

    def about(self) -> str:
        """What a verdict across the members is about."""
        if self.external:
            return ("A verdict across them is about these checkpoints and the recipe that made "
                    "them")
        return "A verdict across them is about this recipe and this selection, not BERT-base"

    def table(self) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of the members table the report shows: a pretrained member's MLM
        accuracy against its floor and whether it learned; an external checkpoint's revision
        and the commit it was read at."""
        if self.external:
            return (["member", "checkpoint", "revision", "commit"],
                    [[r["member"], r["checkpoint"], r.get("revision") or "–",
                      (r.get("sha") or "–")[:12]] for r in self.rows])
        return (["member", "held-out MLM accuracy", "floor", "learned"],
                [[r["member"], r.get("mlm_accuracy") or "–", r.get("mlm_floor") or "–",
                  "yes" if r.get("learned") == "True" else "no: set aside"] for r in self.rows])

    def words(self) -> str:
        """"18 of 25 seeds of <recipe> that left the unigram floor (7 set aside: 201, …)"; for
        checkpoints pretrained elsewhere, "5 checkpoints read as they are (<names>; <shape>)"."""
        if self.external:
            names = [r["checkpoint"] + (f"@{r['revision']}" if r.get("revision") else "")
                     for r in self.rows]
            first = self.rows[0]
            shape = (f"; {first['layers']}-layer, {first['hidden']}-wide {first['model_type']}"
                     if first.get("layers") and first.get("hidden") else "")
            return f"{len(self.rows)} checkpoints read as they are ({', '.join(names)}{shape})"
        aside = self.set_aside
        named = f" ({len(aside)} set aside: {', '.join(aside)})" if aside else ""
        return (f"{len(self.learned)} of {len(self.rows)} seeds drawn of {self.recipe()} that "
                f"left the unigram floor{named}")
