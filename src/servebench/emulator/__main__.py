"""`python -m servebench.emulator`: the emulated OpenAI-compatible server (see `emulator.server.main`)."""

import sys

from servebench.emulator.server import main

sys.exit(main())
