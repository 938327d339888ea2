"""Live: follow runs while they are written, re-judge them as data arrives, and announce
each finding once, when it first appears (and again when it changes).

The pieces: followers (:mod:`trainlens.watch.follow`) read what each source gained since
the last poll; :class:`~trainlens.watch.live.LiveRun` keeps a run's frame and judges it
through the gate's own path (:func:`trainlens.gate.runner.gate_run`), so ``watch`` on a
finished file ends with the findings ``analyze`` and ``gate`` give; sinks
(:mod:`trainlens.watch.sinks`) show and send the events. The optional packages (watchfiles,
rich, apprise, prometheus-client: the ``watch`` extra) are imported only here, never by
``import trainlens``.
"""
