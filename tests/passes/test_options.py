"""SearchOptions: what the search is asked, one value for every pass."""

from __future__ import annotations

import pytest

from onnxscript_ep_passes import SearchOptions
from onnxscript_ep_passes.ep.dims import DimSizes
from onnxscript_ep_passes.passes import LowerOpsetForEpPass
from onnxscript_ep_passes.passes.options import search_options


def test_options_are_checked_once_and_normalised() -> None:
    options = SearchOptions.of(lowest_opset=20, dims="batch=2")
    assert options.lowest_opset == 20 and options.dims == DimSizes({"batch": 2})
    assert SearchOptions().lowest_opset == 18 and SearchOptions().legalize
    with pytest.raises(ValueError, match="below 18"):
        SearchOptions.of(lowest_opset=17)
    with pytest.raises(ValueError, match="below lowest_opset 23"):
        SearchOptions.of(target_opset=22, lowest_opset=23)


def test_keywords_are_sugar_for_the_options() -> None:
    options = SearchOptions.of(target_opset=23, legalize=False)
    assert search_options(None, target_opset=23, legalize=False) == options
    assert LowerOpsetForEpPass("cuda", target_opset=23, legalize=False).options == options
    assert LowerOpsetForEpPass("cuda", options=options).options is options
    with pytest.raises(ValueError, match="not both"):
        LowerOpsetForEpPass("cuda", options=options, measure=True)
