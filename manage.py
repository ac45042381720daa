#!/usr/bin/env python
"""Django's command-line utility for the pledge reconciliation system."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    # After the settings module is chosen, as Django's own manage.py does.
    from django.core.management import execute_from_command_line  # noqa: PLC0415

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
