"""What the EP search is asked: one value, :class:`SearchOptions`, for every pass and command.

Rules:

1. The options are ``target_opset`` (force that opset), ``lowest_opset`` (weigh no opset
   below it: :func:`lowest_opset_of`), ``legalize`` (also weigh legalized candidates),
   ``dims`` (the sizes of symbolic dimensions for the cost estimate, always a
   :class:`~onnxscript_ep_passes.ep.dims.DimSizes`) and ``measure`` (run the best
   candidates in real sessions on the EP).
2. :meth:`SearchOptions.of` checks them once: a bad ``lowest_opset`` is a
   :class:`ValueError` when the options are built, before any model is read.
3. Each pass (``LowerOpsetForEpPass``, ``LegalizeForEpPass``, ``FuseForEpPass``,
   ``OptimizeForEpPass``), ``placement_report``, ``torch_export.lower_for_ep`` and the
   Olive pass take ``options=``; their keyword arguments of the same names are sugar
   that builds the options (:func:`search_options`). Giving both is a
   :class:`ValueError`.
4. What the search runs on (the EP, its table, the ORT release) is the
   :class:`~onnxscript_ep_passes.ep.target.EpTarget`, apart from these options.
"""

from __future__ import annotations

__all__ = ["SearchFlags", "SearchKeywords", "SearchOptions", "lowest_opset_of", "search_options"]

import dataclasses
from typing import TYPE_CHECKING, TypedDict

from onnxscript_ep_passes.ep.dims import DimSizes, DimsSpec
from onnxscript_ep_passes.lowering.lower_opset import MIN_TARGET_OPSET

if TYPE_CHECKING:
    from typing_extensions import Unpack


def lowest_opset_of(lowest_opset: int | None, target_opset: int | None = None) -> int:
    """The lowest opset a search may weigh: ``lowest_opset``, or 18 when None.

    A bound makes the search cheaper when the opsets below it are not wanted (each lower
    candidate of a model whose ops expand below some opset can be several times the
    model's size); the choice is then the best of the opsets weighed.

    Raises:
        ValueError: ``lowest_opset`` is below 18, or above an explicit ``target_opset``.
    """
    if lowest_opset is None:
        return MIN_TARGET_OPSET
    if lowest_opset < MIN_TARGET_OPSET:
        raise ValueError(
            f"lowest_opset {lowest_opset} is below {MIN_TARGET_OPSET}, the lowest opset the "
            "adapters reach"
        )
    if target_opset is not None and target_opset < lowest_opset:
        raise ValueError(
            f"target_opset {target_opset} is below lowest_opset {lowest_opset}: "
            "the search may not weigh it"
        )
    return lowest_opset


class SearchFlags(TypedDict, total=False):
    """The keywords that build :class:`SearchOptions` but ``target_opset`` (for the
    ``**search`` of a signature that takes it by position)."""

    lowest_opset: int | None
    legalize: bool
    dims: DimsSpec
    measure: bool


class SearchKeywords(SearchFlags, total=False):
    """The keywords that build :class:`SearchOptions` (for ``**search`` signatures)."""

    target_opset: int | None


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """What the search is asked (module docstring).

    Attributes:
        target_opset: Force this opset instead of choosing (None: choose).
        lowest_opset: The lowest opset the search weighs (18 unless bounded).
        legalize: Also weigh legalized candidates; False gives the plain opset choice.
        dims: Sizes of the model's symbolic dimensions for the cost estimate.
        measure: Measure the best candidates in real sessions on the EP.
    """

    target_opset: int | None = None
    lowest_opset: int = MIN_TARGET_OPSET
    legalize: bool = True
    dims: DimSizes = dataclasses.field(default_factory=DimSizes)
    measure: bool = False

    def __post_init__(self) -> None:
        lowest_opset_of(self.lowest_opset, self.target_opset)

    @classmethod
    def of(
        cls,
        *,
        target_opset: int | None = None,
        lowest_opset: int | None = None,
        legalize: bool = True,
        dims: DimsSpec = None,
        measure: bool = False,
    ) -> SearchOptions:
        """The options, checked (rule 2): ``lowest_opset`` None is 18; ``dims`` a
        ``DimSizes``, a mapping, a ``--dims`` string or None."""
        return cls(
            target_opset=target_opset,
            lowest_opset=lowest_opset_of(lowest_opset, target_opset),
            legalize=legalize,
            dims=DimSizes.of(dims),
            measure=measure,
        )


def search_options(
    options: SearchOptions | None, **search: Unpack[SearchKeywords]
) -> SearchOptions:
    """``options``, or the options the keywords ``search`` name (rule 3).

    Raises:
        ValueError: ``options`` and a keyword other than its default are both given.
    """
    if options is None:
        return SearchOptions.of(**search)
    defaults: dict[str, object] = {"legalize": True, "measure": False}
    named = [name for name, value in search.items() if value != defaults.get(name)]
    if named:
        raise ValueError(f"pass options= or {', '.join(named)}=, not both")
    return options
