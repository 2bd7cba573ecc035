"""The numeric bounds the models and the engine share, in a module of their own: the
engine's signatures and the queue settings read them without importing the task or
envelope models (a scheduled function's cold start makes no task)."""

MAX_DELAY_SECONDS = 366 * 86_400  # a year (and a leap day)
MAX_PARENTS = 100  # the most tasks one task may wait for (`after`)
# The longest time limit an attempt may have (`timeout_seconds`): a week.
MAX_TIMEOUT_SECONDS = 7 * 86_400
# A dead-letter replay or purge of "all" acts on a slice: at most this many, within about
# this many seconds (tierq.logic.dlq).
SLICE_MAX_ITEMS = 10_000
SLICE_SECONDS = 5.0
