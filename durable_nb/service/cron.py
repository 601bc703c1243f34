"""Cron text and the due times it gives, in a time zone: parsed by cronsim, a maintained library.

Five fields (minute hour day-of-month month day-of-week), or six with seconds last, or one of
the usual names (``@hourly``, ``@daily``, …). Times are epoch seconds; a due time falls on a
whole second. Across a daylight-saving change a zone's times follow cron's own rules (cronsim's):
a time that does not exist that day runs at the first one that does, one that happens twice runs once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import InvalidSchedule

__all__ = ["ALIASES", "Cron", "parse_cron"]

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EXAMPLE = "'*/5 * * * *' (every five minutes) or '0 9 * * MON-FRI' (9:00 on weekdays)"
_LONGEST = 200


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron expression in an IANA time zone."""

    text: str
    timezone: str

    @property
    def _expression(self) -> str:
        return ALIASES.get(self.text.lower(), self.text)

    def _iterate(self, moment: float, reverse: bool) -> datetime:
        from cronsim import CronSim

        start = datetime.fromtimestamp(moment, UTC).astimezone(ZoneInfo(self.timezone))
        return next(iter(CronSim(self._expression, start, reverse=reverse)))

    def after(self, moment: float) -> float:
        """Return the first due time strictly after the epoch time ``moment``."""
        return self._iterate(math.floor(moment), reverse=False).timestamp()

    def latest(self, moment: float) -> float:
        """Return the last due time at or before the epoch time ``moment``."""
        return self._iterate(math.floor(moment) + 1, reverse=True).timestamp()


def parse_cron(text: object, timezone: object = "UTC", field: str = "cron") -> Cron:
    """Return the Cron of ``text`` in ``timezone``; raise InvalidSchedule naming ``field`` and an example."""
    from cronsim import CronSimError

    if not isinstance(text, str) or not text.strip() or len(text) > _LONGEST:
        raise InvalidSchedule(f"{field} must be cron text such as {_EXAMPLE}, not {text!r:.80}.")
    words = " ".join(text.split())
    if not isinstance(timezone, str) or not timezone:
        raise InvalidSchedule(
            f"timezone must be an IANA time zone name such as 'UTC' or 'Europe/Paris', not {timezone!r:.80}."
        )
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"timezone {timezone!r:.80} is no IANA time zone name; use one such as 'UTC' or 'Europe/Paris'."
        ) from None
    cron = Cron(words, timezone)
    try:
        from cronsim import CronSim

        next(iter(CronSim(cron._expression, datetime.now(zone))))
    except (CronSimError, StopIteration) as error:
        reason = str(error) or "it never comes"
        raise InvalidSchedule(
            f"{field} {words!r:.80} cannot be used ({reason}); write cron text such as {_EXAMPLE}."
        ) from None
    return cron
