"""Settings that a local run derives by itself."""

import multiprocessing

import pytest

from dashboard.settings import _local_secret

PROCESSES = 12
ROUNDS = 20


def _read_secret(barrier, folder, results):
    barrier.wait()
    try:
        results.put(("ok", _local_secret("secret_key", folder)))
    except Exception as exc:  # the assertion below names it
        results.put(("error", repr(exc)))


@pytest.mark.long
def test_processes_starting_together_on_a_fresh_machine_share_one_secret(tmp_path):
    """``make run`` starts web, worker and beat at once on an empty ``var/``: each
    must come up, and all with the same non-empty key."""
    context = multiprocessing.get_context("fork")
    for round_ in range(ROUNDS):
        folder = tmp_path / f"var{round_}"
        barrier = context.Barrier(PROCESSES)
        results = context.Queue()
        procs = [
            context.Process(target=_read_secret, args=(barrier, folder, results))
            for _ in range(PROCESSES)
        ]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join(30)

        errors = [detail for kind, detail in outcomes if kind == "error"]
        assert errors == [], f"round {round_}"
        keys = {detail for _, detail in outcomes}
        assert len(keys) == 1 and "" not in keys, f"round {round_}: {len(keys)} keys"
        assert (folder / "secret_key").stat().st_mode & 0o777 == 0o600
        assert [p.name for p in folder.iterdir()] == ["secret_key"]
