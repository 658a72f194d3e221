import os
import sys

# `python -m ctxfst` puts the working directory first on the import path: a knowledge
# base's own yaml.py (imported lazily, later) must not shadow the library.
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from .cli import main  # noqa: E402

sys.exit(main())
