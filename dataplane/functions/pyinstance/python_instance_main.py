#!/usr/bin/env python3
"""Magnetar's Python function instance: runs one instance of a user's
Python function, started by a function worker with the command line of
Apache Pulsar's python_instance_main.py. See magnetar_instance/__init__.py.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from magnetar_instance.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
