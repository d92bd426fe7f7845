"""Why the search chose its candidate: the rule that decided, in words and as a value.

:func:`choice_reason` reads a made :class:`~onnxscript_ep_passes.passes.choice.EpLoweringChoice`
and names the rule (:mod:`.lower_for_ep`, :mod:`~onnxscript_ep_passes.ep.cost`) that picked
its candidate, first that applies:

1. ``measured``: the chosen candidate was run in a real session and was the fastest of those
   measured (``--measure``).
2. ``target_opset``: the caller asked for an opset, so only its candidates could be chosen.
3. ``wholly_on_ep``: the chosen candidate runs wholly on the EP (no fallback, no Memcpy);
   the search stops at the first such opset, since a lower one could only tie.
4. ``tie``: other candidates cost the same estimate; ties go to fewer of the model's nodes
   replaced, then the higher opset, then plain before legalized.
5. ``cheapest``: the lowest estimate of the candidates no other dominates.

Whatever the rule, ``dominated`` lists each candidate whose estimate is below the chosen
one's but that another candidate dominates (more bytes moved and more CPU compute, no
fewer Memcpy: :meth:`~onnxscript_ep_passes.ep.cost.PlacementCost.dominates`), with the
candidate that dominates it: the reason a lower estimate lost.
"""

from __future__ import annotations

__all__ = ["ChoiceReason", "ChoiceRule", "choice_reason"]

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from onnxscript_ep_passes.ep.cost import CandidateRank, best_candidate, candidate_rank
from onnxscript_ep_passes.passes.candidates import CandidateEntry, CandidateKey

ChoiceRule = Literal["measured", "target_opset", "wholly_on_ep", "tie", "cheapest"]


def _name(key: CandidateKey) -> str:
    opset, legalized = key
    return f"{opset}{' legalized' if legalized else ''}"


@dataclasses.dataclass(frozen=True)
class ChoiceReason:
    """The rule that chose (module docstring), a sentence saying it, and the candidates a
    lower estimate did not save: ``(candidate, dominated by)``."""

    rule: ChoiceRule
    text: str
    dominated: tuple[tuple[CandidateKey, CandidateKey], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "reason": self.text,
            "dominated": [
                {
                    "opset": key[0],
                    "legalized": key[1],
                    "by": {"opset": by[0], "legalized": by[1]},
                }
                for key, by in self.dominated
            ],
        }

    def __str__(self) -> str:
        return self.text


def _rank(c: CandidateEntry) -> CandidateRank:
    return candidate_rank(c.cost, opset=c.opset, replaced=c.replaced, legalized=c.legalized)


def choice_reason(
    candidates: Mapping[CandidateKey, CandidateEntry], chosen_key: CandidateKey, source_opset: int
) -> ChoiceReason:
    """Why the search chose ``candidates[chosen_key]`` from ``candidates`` (module docstring)."""
    entries = list(candidates.values())
    chosen = candidates[chosen_key]
    dominated = tuple(
        (c.key, by.key)
        for c in entries
        if c.cost.cost < chosen.cost.cost
        for by in [next((o for o in entries if o.cost.dominates(c.cost)), None)]
        if by is not None
    )
    lost = ""
    if dominated:
        lost = "; " + ", ".join(
            f"{_name(key)} is estimated lower but {_name(by)} dominates it "
            "(fewer bytes moved, less CPU compute, no more Memcpy)"
            for key, by in dominated
        )
    measured = [c for c in entries if c.measurement is not None]
    if chosen.measurement is not None and len(measured) > 1:
        text = (
            f"fastest of the {len(measured)} candidates measured "
            f"({chosen.measurement.latency_ms:.3f} ms)"
        )
        return ChoiceReason("measured", text, dominated)
    ranks = [_rank(c) for c in entries]
    best = best_candidate(ranks)
    if (best.opset, best.legalized) != chosen.key:
        text = f"opset {chosen.opset} was asked for (target opset); only its candidates count"
        return ChoiceReason("target_opset", text + lost, dominated)
    prediction = chosen.prediction
    if (
        not prediction.fallback_nodes
        and prediction.memcpy == 0
        and not chosen.legalized
        and chosen.opset == min(c.opset for c in entries)
    ):
        where = "the model as given" if chosen.opset == source_opset else "it"
        text = (
            f"wholly on the EP at opset {chosen.opset} (no fallback, no Memcpy): {where} "
            "cannot be beaten, so no lower opset is weighed"
        )
        return ChoiceReason("wholly_on_ep", text + lost, dominated)
    ties = [c for c in entries if c is not chosen and c.cost.cost == chosen.cost.cost]
    if ties:
        text = (
            f"ties on the estimate ({chosen.cost.cost:.1f} us) with "
            f"{', '.join(_name(c.key) for c in ties)}; ties go to fewer replaced nodes, then "
            "the higher opset, then plain before legalized"
        )
        return ChoiceReason("tie", text + lost, dominated)
    text = f"the lowest estimate ({chosen.cost.cost:.1f} us) of the undominated candidates"
    return ChoiceReason("cheapest", text + lost, dominated)
