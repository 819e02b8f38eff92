"""The exceptions: mstar_c.Error and one subclass per library status code.

Every failing call raises the subclass of its status with the library's message as text
(mstar_last_error). Error derives from RuntimeError, and some subclasses also from the builtin
that Python code would catch for the same failure (ValueError for a bad argument, TimeoutError
for a bounded wait that ran out, ...).
"""


class Error(RuntimeError):
    """Base class of every mstar_c error. status: the library's code; status_name: its name."""

    status = 0
    status_name = "MSTAR_OK"


def _make(name, status, status_name, doc, *bases):
    cls = type(name, (Error,) + bases, {"status": status, "status_name": status_name,
                                        "__doc__": doc, "__module__": "mstar_c"})
    return cls


InvalidArgumentError = _make("InvalidArgumentError", -1, "MSTAR_EINVAL",
                             "A bad argument from the caller.", ValueError)
OutOfMemoryError = _make("OutOfMemoryError", -2, "MSTAR_ENOMEM", "An allocation failed.",
                         MemoryError)
ProtocolError = _make("ProtocolError", -3, "MSTAR_EPROTO",
                      "Malformed input from another process (message, descriptor).")
NotFoundError = _make("NotFoundError", -4, "MSTAR_ENOENT",
                      "No such object (file, segment, uuid, request).", LookupError)
AlreadyExistsError = _make("AlreadyExistsError", -5, "MSTAR_EEXIST", "Already exists.")
OSCallError = _make("OSCallError", -6, "MSTAR_EIO",
                    "An operating-system call failed; the message carries errno.", OSError)
TryAgainError = _make("TryAgainError", -7, "MSTAR_EAGAIN", "Nothing ready yet; try again.")
TimedOutError = _make("TimedOutError", -8, "MSTAR_ETIMEDOUT", "A bounded wait ran out.",
                      TimeoutError)
NoSpaceError = _make("NoSpaceError", -9, "MSTAR_ENOSPC",
                     "Out of capacity (arena full, pool exhausted).")
NotSupportedError = _make("NotSupportedError", -10, "MSTAR_ENOTSUP",
                          "Not built in, or no device present.", NotImplementedError)
StateError = _make("StateError", -11, "MSTAR_ESTATE",
                   "The call is not valid in the object's current state.")
DeviceError = _make("DeviceError", -12, "MSTAR_EDEVICE", "The device runtime reported an error.")
ClosedError = _make("ClosedError", -13, "MSTAR_ECLOSED", "The handle or peer is closed.")
OutOfRangeError = _make("OutOfRangeError", -14, "MSTAR_ERANGE",
                        "A value out of its allowed range.", ValueError)
CanceledError = _make("CanceledError", -15, "MSTAR_ECANCELED",
                      "The operation was cancelled (abort, shutdown).")
RemoteError = _make("RemoteError", -16, "MSTAR_EREMOTE",
                    "The remote side or network engine failed the operation.")

BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, OutOfMemoryError, ProtocolError, NotFoundError, AlreadyExistsError,
    OSCallError, TryAgainError, TimedOutError, NoSpaceError, NotSupportedError, StateError,
    DeviceError, ClosedError, OutOfRangeError, CanceledError, RemoteError)}

__all__ = ["Error"] + [cls.__name__ for cls in BY_STATUS.values()]
