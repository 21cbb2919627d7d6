"""Makes magnetar_instance importable from the tests (run pytest from the
repository root or from dataplane/functions/pyinstance)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
