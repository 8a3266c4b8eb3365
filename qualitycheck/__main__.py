import sys

from qualitycheck.cli._main import main

sys.exit(main())
