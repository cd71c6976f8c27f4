"""Errors a user can cause and fix. The CLI prints these as one line; everything else is a bug."""


class GRPOKitError(Exception):
    """Base class for user-facing errors: the message names the problem and the fix."""


class ConfigError(GRPOKitError, ValueError):
    """A config field has a value outside its allowed range."""


class DataError(GRPOKitError, ValueError):
    """A dataset file or row is malformed. The message names the file, the line and the problem."""


class RewardError(GRPOKitError, RuntimeError):
    """A reward function raised, returned the wrong number of values, or returned NaN/inf."""


class CheckpointError(GRPOKitError, RuntimeError):
    """A checkpoint is missing, corrupt, or incompatible with the config."""


class TrainingError(GRPOKitError, RuntimeError):
    """Training cannot go on (for example too many skipped updates in a row); the message says what to try."""


class RunFolderError(GRPOKitError, RuntimeError):
    """An output folder cannot be used as asked: it holds another run, has nothing to resume, or is in use."""


class DiskFullError(GRPOKitError, OSError):
    """A write failed because the disk is full; the message names the file. Earlier files are intact."""



class StopRequested(GRPOKitError):
    """A stop request (one SIGTERM, Ctrl-C or SIGHUP) found a reward call still running after the grace
    period (``judges.REWARD_STOP_GRACE_S``); ``train()`` ends the run without finishing that step."""
