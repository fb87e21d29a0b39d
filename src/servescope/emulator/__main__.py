"""`python -m servescope.emulator`: the emulated OpenAI-compatible server (see `emulator.server.main`)."""

import sys

from servescope.emulator.server import main

sys.exit(main())
