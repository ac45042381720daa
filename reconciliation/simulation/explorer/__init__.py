"""Deterministic fault-space explorer: ``manage.py explore_faults`` (docs/design.md §11).

Random fault injection (``simulate``) samples the failure space; this enumerates it, in the
spirit of FoundationDB's simulation tests. One intent's whole life runs in-process with the
real code against DynamoDB Local: the client's POST through the Django API and the retries
the API contract tells it to make, then, at rest, the stuck-claim sweep, a person's
RETRY_COMMIT on each open case and the retry task. Every DynamoDB call is named where it
leaves botocore (``before-send``, so each SDK retry is a call of its own), and a scenario
is a plan naming which calls fail and how. Time is simulated, sleeps are skipped and
nothing is sampled, so a scenario id alone replays it.

Depth 1 is every fault kind at every call of the fault-free life; depth 2 adds a second
fault at every later call of the first fault's own episode (request or task run), and with
``later_writes`` at every write of its later episodes too. After each life the invariants
of :mod:`reconciliation.simulation.invariants` are checked at rest.

The only randomness left is in the system's UUIDs (tokens, attempt ids), which steer
nothing; ``seed`` picks the scenarios' idempotency keys.

The parts, each using only those listed before it: :mod:`.vocabulary` (fault kinds, call
points, scenario ids, the matrix's columns), :mod:`.wire` (naming each call, the
``before-send`` hook that applies a plan), :mod:`.life` (the client, the system at rest,
the per-episode checks), :mod:`.session` (a worker's tables, settings and token; one
scenario run), :mod:`.report` (the matrix and its lines) and :mod:`.runner` (which scenarios,
the workers, :func:`explore`). Two hands at once (``--actors 2``) add :mod:`.schedule` (the
scheduler and the enumeration), :mod:`.catalogue` (the hands, the pairs, the preludes; their
wire is :class:`.wire.HandsWire`) and :mod:`.hands` (one schedule, the run).
"""

from reconciliation.dynamo.client import TableNames
from reconciliation.simulation.explorer.life import Life, client_next, read_response
from reconciliation.simulation.explorer.report import matrix_lines, result_lines
from reconciliation.simulation.explorer.runner import (
    Exploration,
    ExploreConfig,
    LocalRunner,
    ProcessRunner,
    Progress,
    applicable,
    depth_one,
    exact_plan,
    explore,
    first_calls,
    matches,
    second_faults,
)
from reconciliation.simulation.explorer.session import Result, Session, run_guarded, scenario_key
from reconciliation.simulation.explorer.vocabulary import (
    COLUMNS,
    FAULT_FREE,
    FAULT_KINDS,
    KINDS,
    OWN_SHARD,
    WRITE_ONLY,
    Fault,
    FaultKind,
    Point,
    scenario_id,
    scenario_parse,
)
from reconciliation.simulation.explorer.wire import (
    CallRecord,
    CallShape,
    Wire,
    call_shape,
    table_roles,
    unfenced_writes,
)

__all__ = [
    "COLUMNS",
    "FAULT_FREE",
    "FAULT_KINDS",
    "KINDS",
    "OWN_SHARD",
    "WRITE_ONLY",
    "CallRecord",
    "CallShape",
    "Exploration",
    "ExploreConfig",
    "Fault",
    "FaultKind",
    "Life",
    "LocalRunner",
    "Point",
    "ProcessRunner",
    "Progress",
    "Result",
    "Session",
    "TableNames",
    "Wire",
    "applicable",
    "call_shape",
    "client_next",
    "depth_one",
    "exact_plan",
    "explore",
    "first_calls",
    "matches",
    "matrix_lines",
    "read_response",
    "result_lines",
    "run_guarded",
    "scenario_id",
    "scenario_key",
    "scenario_parse",
    "second_faults",
    "table_roles",
    "unfenced_writes",
]
