"""Card transactions for the demo and the tests, as JSON-lines files.

Deterministic for a given seed and start time, so a test knows exactly which rows a
query must produce. Malformed lines can be mixed in to exercise the dead-letter path.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

PAYEES = ("grocer", "airline", "bookshop", "cafe", "electronics", "pharmacy", "hotel", "taxi")


@dataclass(frozen=True)
class Transaction:
    transaction_id: str
    account_id: str
    payee: str
    amount: float
    ts: datetime

    def to_json(self) -> str:
        return json.dumps(
            {
                "transaction_id": self.transaction_id,
                "account_id": self.account_id,
                "payee": self.payee,
                "amount": self.amount,
                "ts": self.ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            }
        )


MALFORMED_LINES = (
    '{"transaction_id": "bad-1", "account_id": "acct-1", "amount": "twelve", "ts": "2026-01-01T00:00:00Z"}',
    "this is not json",
    '{"transaction_id": "bad-3", "payee": "cafe", "amount": 12.5, "ts": "2026-01-01T00:00:00Z"}',
)


def transactions(
    count: int, *, start: datetime, seed: int, first_id: int = 0, accounts: int = 5, step_seconds: float = 7.0
) -> list[Transaction]:
    """``count`` transactions ``step_seconds`` apart in event time, from ``start``."""
    rng = random.Random(seed)
    result = []
    for i in range(count):
        amount = round(rng.choice((rng.uniform(5, 120), rng.uniform(120, 480), rng.uniform(500, 2500))), 2)
        result.append(
            Transaction(
                transaction_id=f"tx-{first_id + i:06d}",
                account_id=f"acct-{rng.randrange(accounts)}",
                payee=rng.choice(PAYEES),
                amount=amount,
                ts=start + timedelta(seconds=(first_id + i) * step_seconds),
            )
        )
    return result


def write_batch(folder: Path, name: str, rows: list[Transaction], malformed: tuple[str, ...] = ()) -> Path:
    """Write one JSON-lines file atomically (the file source must never see half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [t.to_json() for t in rows]
    for index, bad in enumerate(malformed):
        lines.insert(min(len(lines), (index + 1) * max(1, len(lines) // (len(malformed) + 1))), bad)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = folder / f"{name}.json"
    os.replace(tmp, target)
    return target
