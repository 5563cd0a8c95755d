"""evlog's sitecustomize: set evlog up in this Python process, then run the user's own sitecustomize.

evlog-instrument puts this folder first on PYTHONPATH, so every Python process of the run imports it.
Except multiprocessing's resource tracker: a helper process of the standard library that runs none of
the program's code (it unlinks the semaphores and shared memory the program leaked), where evlog would
only double the process's memory and count one more process of the run.
"""

#: the command multiprocessing starts its resource tracker with (``python -c "..."``)
_TRACKER = "from multiprocessing.resource_tracker import main"


def _runs_program_code() -> bool:
    import sys

    argv = getattr(sys, "orig_argv", ())
    return not (len(argv) > 2 and argv[-2] == "-c" and argv[-1].startswith(_TRACKER))


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


if _runs_program_code():
    _evlog_start()
_chain_user_sitecustomize()
