"""The exceptions users see: a one-line message naming the problem and the fix."""


class ZooError(Exception):
    """An expected failure (bad input, missing weights, no network ...).

    The CLIs print ``error: <message>`` and exit 1 (2 for a UsageError) without a
    traceback; library users can catch it. The message is one line and says how to fix it.
    """


class UsageError(ZooError):
    """A command line or call that can never work as written (a bad option value, a malformed
    prompt, an output that is an input): the CLIs exit 2, as argparse does."""
