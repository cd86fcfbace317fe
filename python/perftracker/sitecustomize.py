"""Turns perftracker's in-worker collector on in every Python process of a training job.

Active only when PERFTRACKER_AGENT_SOCKET or PERFTRACKER_ENABLE is set. The build copies this file
to build/python/sitecustomize.py, so PYTHONPATH=build/python is all a job needs. Python imports
only the first sitecustomize on sys.path, so this one runs the next one (e.g. Debian's) itself.
Nothing here may raise: a broken collector must never stop the training job from starting.
"""
import os
import sys


def _chain():
    here = os.path.realpath(__file__)
    for d in sys.path:
        cand = os.path.join(d or os.getcwd(), "sitecustomize.py")
        if os.path.isfile(cand) and os.path.realpath(cand) != here and \
                os.path.basename(os.path.dirname(os.path.realpath(cand))) != "perftracker":
            import importlib.util
            spec = importlib.util.spec_from_file_location("_perftracker_next_sitecustomize", cand)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return


def _activate():
    if not (os.environ.get("PERFTRACKER_AGENT_SOCKET") or os.environ.get("PERFTRACKER_ENABLE")):
        return
    from perftracker import hooks, identity
    if hooks.is_helper_of_a_rank():
        return  # started by a rank (same RANK): the rank reports, its helpers do not
    if identity.is_launcher():
        return  # torchrun's own process starts the ranks; it is none of them
    from perftracker import config
    os.environ.setdefault(config.KINETO_LOG_LEVEL_ENV, config.KINETO_QUIET_LEVEL)
    hooks.enable()


try:
    _chain()
except Exception as e:  # someone else's sitecustomize: report, never stop the job
    sys.stderr.write(f"perftracker: chained sitecustomize failed: {e!r}\n")
try:
    _activate()
except Exception as e:
    sys.stderr.write(f"perftracker: worker collector not enabled: {e!r}\n")
