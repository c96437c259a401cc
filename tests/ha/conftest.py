"""Fixtures of the HA store tier: one Patroni cluster per module (tests/support/ha.py)."""

from tests.support.ha import ha, ha_cluster, ha_database

__all__ = ["ha", "ha_cluster", "ha_database"]
