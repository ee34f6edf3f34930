"""The one exception type users see: a one-line message naming the problem and the fix."""


class ZooError(Exception):
    """An expected failure (bad input, missing weights, no network ...).

    The CLIs print ``error: <message>`` and exit non-zero without a traceback;
    library users can catch it. The message is one line and says how to fix it.
    """
