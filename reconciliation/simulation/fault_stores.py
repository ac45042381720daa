"""Stores on clients built for injecting faults: the drill's and the simulator's own.

Both run on the live engine beside real traffic, and inject faults into their own calls
only. A :class:`FaultStores` holds one :class:`~reconciliation.simulation.faults.FaultScope`
and, per region, a client of its own carrying the fault hooks (built on first use), which
consult that scope and nothing else; the shared clients of the process carry no hook
(docs/design.md §11). Pass its stores to the services (``pledge_submit(store=…)``): a
call made on a shared store meets none of these faults.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from reconciliation.dynamo.client import Region, home_region, regions, table_names
from reconciliation.simulation.fault_hooks import fault_injecting_client
from reconciliation.simulation.faults import FaultPlan, FaultScope
from reconciliation.stores import Store

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class FaultStores:
    """Every region's tables on fault-injecting clients of one :class:`FaultScope`."""

    def __init__(self) -> None:
        self.scope = FaultScope()
        self._clients: dict[Region, DynamoDBClient] = {}
        self._lock = threading.Lock()

    def injected(self, plan: FaultPlan | Mapping[str, float]) -> AbstractContextManager[FaultPlan]:
        """``plan``'s faults on these stores' calls for the block, then none."""
        return self.scope.injected(plan)

    def region(self, region: Region) -> Store:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self._clients[region] = fault_injecting_client(region, self.scope)
        return Store(client, table_names(), region, faults=self.scope)

    def home(self, key: str) -> Store:
        """``key``'s home region, as ``stores.home_store`` resolves it."""
        return self.region(home_region(key))

    def every(self) -> list[Store]:
        return [self.region(region) for region in regions()]
