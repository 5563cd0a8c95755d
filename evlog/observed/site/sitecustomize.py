"""evlog's sitecustomize: set evlog up in this Python process, then run the user's own sitecustomize.

evlog-instrument puts this folder first on PYTHONPATH, so every Python process of the run imports it.
"""


def _evlog_start():
    try:
        from evlog.observed import boot

        boot.start()
    except Exception as exc:  # evlog not importable here: the program still runs
        import os

        os.write(2, f"evlog: set-up skipped in this process: {exc!r}\n".encode())


def _chain_user_sitecustomize():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_evlog_start()
_chain_user_sitecustomize()
