"""Locks a fork waits for: a child must not start with a build half done in another thread.

``hold(lock)``: each fork (``os.fork`` and everything built on it) first waits for ``lock``, bounded,
then releases it on both sides, so a child never inherits SDK or exporter modules half imported.

Python runs the ``before`` hooks of ``os.register_at_fork`` in the reverse order of registration, and
several modules' hooks take their own lock there: logging's, concurrent.futures.thread's shutdown lock.
A build under our lock needs those locks (``logging.getLogger`` on an SDK module's import; the SDK's
resource detectors submit to a thread pool). If such a hook ran before ours, the fork would hold that
lock while waiting for ours, and the build would wait for it: both stuck until the wait runs out. So
``register_last()``, called by each build before it takes its lock, imports those two modules (every
build imports them anyway) and registers our hooks again if modules were imported since the last
time: the newest registration runs first, older ones stand aside. (No other standard module takes a
lock in a before-hook.)

If the wait still runs out (a holder stuck for WAIT seconds), the fork goes on, and the child, where
the holder does not exist, gets the lock back unlocked rather than waiting for it forever; what was
being built may be unusable there, and the child says so once.
"""
from __future__ import annotations

import itertools
import os
import sys

WAIT = 5.0  # seconds a fork waits for a lock
_guards: list = []  # [lock, state, wait, quiet] in registration order; state: None, True (held by this fork),
# False (timed out)
_generation = [0]  # the registration whose before-hook acts; the others stand aside
_numbers = itertools.count(1)  # one number per registration (next() is atomic: two threads never share one)
_modules_seen = [-1]  # len(sys.modules) at the last registration


def hold(lock, wait: float | None = None, quiet: bool = False) -> None:
    """Forks wait for ``lock`` (``wait`` seconds at most, else WAIT) and release it on both sides; ``quiet``: a
    child forked after the wait ran out says nothing (the lock guards no set-up)."""
    _guards.append([lock, None, wait, quiet])
    if _generation[0] == 0:
        _register()


def register_last() -> None:
    """Our hooks run before every at-fork hook registered so far (see the module docstring); a no-op
    when no module was imported since the last call."""
    import concurrent.futures.thread  # noqa: F401  (their hooks take a lock: ours must come after them)
    import logging  # noqa: F401

    if len(sys.modules) != _modules_seen[0] and _guards:
        _register()


def _register() -> None:
    if not hasattr(os, "register_at_fork"):
        return
    _modules_seen[0] = len(sys.modules)
    gen = next(_numbers)

    def before() -> None:
        if gen == _generation[0]:
            for g in reversed(_guards):  # the last registered first: sdk's build lock, then the exporters'
                g[1] = g[0].acquire(timeout=WAIT if g[2] is None else g[2])

    os.register_at_fork(before=before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)
    _generation[0] = gen  # only once registered: a fork in between still has an earlier one acting


def _after_in_parent() -> None:  # registered once per generation: the first call does the work
    for g in _guards:
        if g[1]:
            g[0].release()
        g[1] = None


def _after_in_child() -> None:
    stuck = False
    for g in _guards:
        if g[1]:
            g[0].release()
        elif g[1] is False:  # held by a thread this process does not have
            stuck = stuck or not g[3]
            reinit = getattr(g[0], "_at_fork_reinit", None)
            if reinit is not None:
                reinit()
        g[1] = None
    if stuck:
        from evlog import notices

        notices.warn_once("fork-wait", f"this process was forked while evlog was setting up its telemetry in "
                          f"another thread (waited {WAIT:g} s); its telemetry may not be exported")
