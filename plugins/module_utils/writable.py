"""Whether a directory (maybe not made yet) can take writes: the rule of the writable_dir module,
shared with job_dir, which checks the jobs directory in the same look at the NAS."""

import os
import tempfile

MB = 1024 * 1024


def existing_directory(path):
    """The path, or its nearest ancestor that exists."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def problem_with(directory, min_free_mb, try_write, writes_here=True):
    """Why the directory cannot take the writes, or None; and its free space in MB.

    With try_write, a temporary file is really made and removed: that also catches root squash
    and quotas, which access() does not see. Without writes_here only its filesystem's free space
    counts (the writes go to a directory below it that someone else makes)."""
    if not os.path.isdir(directory):
        return f"{directory} is not a directory", None
    stats = os.statvfs(directory)
    free_mb = stats.f_bavail * stats.f_frsize // MB
    # Whoever makes the directories below, nothing is written on a read-only filesystem.
    if stats.f_flag & os.ST_RDONLY:
        return f"{directory} is not writable (read-only filesystem)", free_mb
    if not writes_here:
        try_write = False
    elif not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable", free_mb
    if try_write:
        try:
            handle, name = tempfile.mkstemp(prefix=".write-test-", dir=directory)
            os.close(handle)
            os.unlink(name)
        except OSError as error:
            return f"{directory} cannot be written: {error.strerror}", free_mb
    if free_mb < min_free_mb:
        return f"{directory} has {free_mb} MB free, {min_free_mb} MB are needed (is the filesystem full?)", free_mb
    return None, free_mb
