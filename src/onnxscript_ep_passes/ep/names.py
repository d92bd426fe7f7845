"""Names: how ORT spells domains and types.

A leaf module (it imports nothing from the package), so every other module can use it.
How users may spell an EP is each EP's profile's (:mod:`~onnxscript_ep_passes.ep.profiles`).
Rules:

- ``""`` and ``"ai.onnx"`` are the same domain, stored as ``""`` (:func:`normalize_domain`).
- Types are spelled as ORT's kernel defs spell them, ``"tensor(float)"``
  (:func:`normalize_type`).
"""

from __future__ import annotations

__all__ = ["normalize_domain", "normalize_type"]


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same (default) domain; return ``""`` for both."""
    return "" if domain in ("", "ai.onnx") else domain


def normalize_type(type_str: str) -> str:
    """Spell a type as ORT's kernel defs do: ``"float"`` -> ``"tensor(float)"``.

    Strings that already carry a container (``tensor(...)``, ``seq(...)``, ``optional(...)``)
    are returned unchanged apart from surrounding whitespace and case of the element type
    name, which ONNX spells in lower case.
    """
    t = type_str.strip()
    if "(" in t:
        return t
    return f"tensor({t.lower()})"
