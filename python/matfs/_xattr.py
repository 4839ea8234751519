"""The state and fingerprint of what a matfs mount serves, read from the
extended attributes it exposes (docs/guide.md, "Extended attributes"):
user.matfs.state on a shard or a snapshot folder, user.matfs.fingerprint on
a snapshot folder. A name symlink is followed. Reading them never computes
anything.

Not for: changing state (matctl rm, rm) or anything without a mount
(matctl stat).
"""

import errno
import os
import re

_PREFIX = "user.matfs."
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _get(path, name):
    try:
        return os.getxattr(path, _PREFIX + name).decode()
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.ENOTSUP):
            raise
        raise OSError(e.errno, "no %s%s on '%s': not a shard or snapshot "
                      "folder of a matfs mount" % (_PREFIX, name, path),
                      path) from None


def state(path):
    """The state of the shard or snapshot folder at path (or a name
    symlink): for a shard "absent", "running", "materialized" or "failed";
    for a snapshot also "partial". Raises OSError (errno ENODATA or
    ENOTSUP) where path is not on a matfs mount or has no state, and the
    errors of getxattr (FileNotFoundError, ...)."""
    return _get(os.fspath(path), "state")


def fingerprint(path):
    """The 64 lowercase hex digits of the snapshot at path: a snapshot
    folder, a name symlink, or a shard (its folder's). Raises OSError as
    state() does."""
    path = os.fspath(path)
    if os.path.isdir(path):
        value = _get(path, "fingerprint")
    else:
        # A shard carries no fingerprint of its own: its folder does.
        real = os.path.realpath(path)
        if not os.path.exists(real):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT),
                                    path)
        value = _get(os.path.dirname(real), "fingerprint")
    if not _HEX64.fullmatch(value):
        raise OSError(errno.EBADMSG, "user.matfs.fingerprint of '%s' is "
                      "not 64 hex digits: %r" % (path, value), path)
    return value


class ShardError(OSError):
    """A shard whose pipeline failed: errno EIO, with what the mount says
    of the failure. error is user.matfs.error (the stage and its exit, or,
    for a reader who may not see the details, who may), stderr the tail of
    the failing stage's stderr (None where it is hidden or empty)."""

    def __init__(self, path, error, stderr):
        msg = "matfs: shard '%s' failed: %s" % (path, error or "no error "
                                                "recorded")
        if stderr:
            tail = stderr.rstrip().splitlines()[-5:]
            msg += "\n  stderr (last lines): " + "\n    ".join(tail)
        super().__init__(errno.EIO, msg, path)
        self.error, self.stderr = error, stderr

    def __str__(self):
        return self.strerror


def _optional(path, name):
    try:
        return os.getxattr(path, _PREFIX + name).decode(errors="replace")
    except OSError:
        return None


def open_shard(path):
    """Opens a shard for reading in binary, as open(path, "rb") does, but an
    EIO at open (its pipeline failed) raises ShardError carrying
    user.matfs.error and user.matfs.stderr instead of a bare OSError."""
    try:
        return open(path, "rb")
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        raise ShardError(path, _optional(path, "error"),
                         _optional(path, "stderr")) from None
