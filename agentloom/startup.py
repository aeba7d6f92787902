"""What a worker process does once it has loaded its code (`agentloom.celery` calls it).

Python's cyclic garbage collector visits every tracked object of the older generations in a
full collection, holding the interpreter lock meanwhile. A ready worker has loaded Django, DRF,
the apps and the engine: about 180,000 such objects (modules, classes, functions, settings),
which live as long as the process, so every older-generation collection pays for all of them
again. With hundreds of runs in flight, whose objects outlive the young generation while their
model calls wait, those collections come often, and every run thread waits for each one.

`freeze_loaded_objects` moves every object tracked so far into the collector's permanent
generation (`gc.freeze`), which no collection visits; what runs create later is collected as
before. Measured with `bench/capacity.py` (two processes, 500 runs in flight): the collector's
time fell from 2.3–3.0 ms a run to 0.86–1.27 ms. The cost: an object loaded before the freeze
that later becomes cyclic garbage is never reclaimed, which start-up objects, living as long as
the process, do not do. The web server does not freeze: its requests' objects die young, and
the journal page's CPU per request was the same with and without.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_loaded_objects"]


def freeze_loaded_objects() -> None:
    """Collect what start-up left behind, then freeze the rest."""
    gc.collect()
    gc.freeze()
