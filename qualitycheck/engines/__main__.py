"""`python -m qualitycheck.engines prepare|verify`: the demo model, outside the CLI (scripts/dev.sh)."""

import sys

from qualitycheck.engines._model import main

sys.exit(main())
