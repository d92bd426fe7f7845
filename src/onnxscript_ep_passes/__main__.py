"""``python -m onnxscript_ep_passes``: the command line."""

import sys

from onnxscript_ep_passes.cli import main

sys.exit(main())
