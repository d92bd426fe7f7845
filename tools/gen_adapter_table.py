#!/usr/bin/env python3
"""Write ``docs/adapters.md``: the adapter registry (opset steps 19 up to the newest opset the
installed onnx knows) as a Markdown table.

Run it from the repository root after adding or changing an adapter::

    python tools/gen_adapter_table.py           # rewrite docs/adapters.md
    python tools/gen_adapter_table.py --check   # exit 1 if the file is out of date

``tests/lowering/test_completeness.py`` fails while the file is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onnxscript_ep_passes.lowering.docs_table import render_adapter_doc

DOC = Path(__file__).resolve().parent.parent / "docs" / "adapters.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOC, help=f"default: {DOC}")
    parser.add_argument(
        "--check", action="store_true", help="only check that the file is up to date"
    )
    args = parser.parse_args(argv)
    text = render_adapter_doc()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run python tools/gen_adapter_table.py")
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
