"""Thread safety of a loaded model: one lock per model, held for the length of each call.

A model may be shared by threads (a web server's handlers, a thread pool): its entry points
(``predict``, ``classify``, ``inpaint``, a SAM predictor's ``set_image``/``predict``) take the
model's lock, so concurrent calls give exactly the results of sequential ones. A lock rather
than per-call state because the shared parts are not ours alone: MLX's evaluation was not
thread-safe before 0.31.2, compiled functions and their cache (zoo.compiled) are shared per
model, and the lazy graph of one call must be evaluated before another call builds on the same
weights. Calls on one model take turns; for parallel work load one model per thread, or batch.

A thread that used MLX keeps per-thread MLX state in C++ thread-locals: its streams, its compile
cache and its random key. Some of their destructors take the GIL, and they run after the thread's
Python part has ended, possibly while the interpreter is finalising: the thread then exits inside
a destructor and the process aborts ("terminate called without an active exception", exit 134)
after correct results. So each entry point (and ``zoo.load``) marks its thread, and the thread
frees that state itself, holding the GIL, as its Python thread state is cleared
(``mx.clear_streams()``, which MLX provides for a thread that is done).
"""
from __future__ import annotations

import functools
import threading

_creating = threading.Lock()  # two first calls at once must not make two locks
_this_thread = threading.local()


class _MlxThreadState:
    """Lives in a thread's ``threading.local`` storage: freed on that thread, with the GIL, as it ends."""

    def __del__(self):
        import mlx.core as mx

        mx.clear_streams()  # the thread's streams, compile cache and random key


def release_mlx_at_thread_exit() -> None:
    """Free this thread's MLX state when the thread ends (the main thread's is MLX's own to free).

    Call it in a thread before it uses MLX; ``zoo.load`` and every entry point do."""
    if threading.current_thread() is not threading.main_thread() and not hasattr(_this_thread, "mlx"):
        _this_thread.mlx = _MlxThreadState()


def lock_of(model) -> threading.RLock:
    """The model's lock (re-entrant: an entry point may call another), made on first use."""
    lock = getattr(model, "_zoo_lock", None)
    if lock is None:
        with _creating:
            lock = getattr(model, "_zoo_lock", None)
            if lock is None:
                lock = threading.RLock()
                object.__setattr__(model, "_zoo_lock", lock)  # an attribute, not a parameter of the module
    return lock


def serialized(owner=lambda first: first):
    """Decorate a method (or a function whose first argument is the model): it runs holding the lock
    of ``owner(first argument)``, the model itself by default (a SAM predictor's: its model)."""
    def decorate(function):
        @functools.wraps(function)
        def locked(first, *args, **kwargs):
            release_mlx_at_thread_exit()
            with lock_of(owner(first)):
                return function(first, *args, **kwargs)
        return locked

    return decorate
