"""Every error a user of the command line can cause, in one light module (no numpy, torch or
HTTP client), so a command that fails early fails fast.

    ValueError
      DatasetError            a dataset is malformed or cannot be prepared
        DatasetUnavailable    the corpus is absent and downloading was not asked for
      ProfileError            a profile file or override is invalid
      WorkloadError           a workload specification selects nothing or is invalid
      OptionError             a `-o key=value` backend option is unknown or malformed
      ThresholdsError         a compare thresholds file is invalid
    RuntimeError
      BackendError            a backend failed to start or answered with an error
      DownloadError           every mirror failed (the message lists why)
    LookupError
      RunNotFoundError        no run, validation or baseline by that reference
"""

from __future__ import annotations


class DatasetError(ValueError):
    """A dataset is malformed or cannot be prepared."""


class DatasetUnavailable(DatasetError):
    """The corpus is not on this machine (and downloading was not asked for); carries the
    acquisition instructions."""


class ProfileError(ValueError):
    pass


class WorkloadError(ValueError):
    pass


class OptionError(ValueError):
    """A `-o key=value` backend option is unknown or has a bad value."""


class ThresholdsError(ValueError):
    pass


class BackendError(RuntimeError):
    """A backend failed to start, or answered a request with an error."""


class DownloadError(RuntimeError):
    """Every mirror failed; the message lists each mirror's failure."""


class RunNotFoundError(LookupError):
    pass


USER_ERRORS = (DatasetError, ProfileError, WorkloadError, OptionError, ThresholdsError, BackendError, DownloadError,
               RunNotFoundError)
