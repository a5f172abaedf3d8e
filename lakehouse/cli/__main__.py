from __future__ import annotations

import sys

from lakehouse.cli import main

sys.exit(main())
