"""Audit exports (docs/design.md §7), one module per job:

- :mod:`.rows` — the formats, the CSV columns and formula neutralisation, event refs;
- :mod:`.run` — one export run: chunks hashed as they go, chain heads, signed manifest;
- :mod:`.events` — export ids and the ``EXPORT#{id}`` lifecycle events;
- :mod:`.delivery` — an export written to a file or streamed over HTTP;
- :mod:`.background` — background (Celery) requests, their status and downloads;
- :mod:`.verify` — the offline check of a file against its manifest.
"""
