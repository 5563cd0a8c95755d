"""The process's Dask role(s), as resource attributes (the client, scheduler, worker and nanny hooks add theirs)."""
from __future__ import annotations

from evlog import notices

_ROLE_ORDER = ("scheduler", "worker", "nanny", "client")


class _Roles:
    """The process's dask.role resource attribute: the first of scheduler, worker, nanny, client
    that this process hosts; a worker's address and name when the process is a worker's."""

    def __init__(self):
        self.have: set = set()
        self.sent: dict = {}

    def add(self, role: str, worker=None) -> None:
        try:
            self.have.add(role)
            attrs = {"dask.role": next(r for r in _ROLE_ORDER if r in self.have)}
            if worker is not None and "scheduler" not in self.have and "dask.worker.address" not in self.sent:
                attrs["dask.worker.address"] = str(worker.address)
                attrs["dask.worker.name"] = str(worker.name)
            changed = {k: v for k, v in attrs.items() if self.sent.get(k) != v}
            if changed:
                from evlog.observed import sdk

                self.sent.update(changed)
                sdk.update_resource(changed)
        except Exception as exc:
            notices.warn_once("dask-role", f"the Dask role could not be recorded: {exc!r}")


roles = _Roles()
