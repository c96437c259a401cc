"""The appservice-namespace registry the tests configure: one Telegram bridge per homeserver,
its puppets ``@telegram_<digits>:<server>`` (a mautrix-telegram registration's namespace)."""

from __future__ import annotations

import re

from fgentic_governance.api.appservice import FLAG, AppserviceNamespace, AppserviceRegistry


def telegram(server: str) -> AppserviceRegistry:
    """The registry of a Telegram bridge on ``server``."""
    return AppserviceRegistry([AppserviceNamespace(
        network="telegram", user_regex=f"@telegram_[0-9]+:{re.escape(server)}")])


def flag(server: str) -> list[str]:
    """``--appservice-namespaces`` with :func:`telegram`, as the chart passes it."""
    return [FLAG, telegram(server).flag_value()]


def puppet(server: str, number: int = 123) -> str:
    """A bridged Telegram user's MXID on ``server``: in :func:`telegram`'s namespace."""
    return f"@telegram_{number}:{server}"
