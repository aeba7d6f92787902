"""Checkpoints by reference, written: a `format: 1` checkpoint rewritten by reference.

`format: 1` checkpoints are self-contained; they still load (`selectors.checkpoints`), and a
resumed one is written back in `format: 2` at its first save; `migrate_checkpoint` converts one
without running it.
"""

from __future__ import annotations

from django.db import transaction

from agentloom.engine import Checkpoint, InstanceFrame
from sessions_app.models import Run
from sessions_app.services.journal import JournalWriter, lock_run


def migrate_checkpoint(run: Run) -> bool:
    """Rewrite a `format: 1` checkpoint by reference; return False when there was nothing to do.

    Its records are journaled already; their rows learn their local seqs, and its snapshots'
    references are recorded, in one transaction.
    """
    with transaction.atomic():
        run = lock_run(run.pk, session_id=run.session_id)
        checkpoint = run.checkpoint
        if not isinstance(checkpoint, dict) or checkpoint.get("format", 1) != 1:
            return False
        if not (checkpoint.get("context") or {}).get("records"):
            return False  # legacy: adopted first, when resumed or by adopt_legacy_journal
        frame = InstanceFrame.from_dict(checkpoint)
        JournalWriter(run, lease_owner=None).sync(Checkpoint.of(frame))
    return True
