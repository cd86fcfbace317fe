"""Where the collector may write on its own: folders of this user's that nobody else may change,
and files made afresh in them, never through a link. Whoever else may write in a folder can plant
a link where a file will be written (it then lands wherever the link points) or a file of their
own (it is then read as the job's); the agent's folders follow the same rule
(src/base/private_dir.h)."""
import os
import stat


def _folder_of_mine(folder: str, others_may: int) -> bool:
    """Whether FOLDER is a folder (not a link to one) of this user's whose mode grants group and
    others nothing beyond OTHERS_MAY."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077 & ~others_may)


def private_folder(folder: str) -> bool:
    """Whether FOLDER is this user's and nobody else may enter it, as the agent makes its
    socket's (MakePrivateDir)."""
    return _folder_of_mine(folder, 0)


def own_folder(folder: str) -> bool:
    """Whether FOLDER is this user's and nobody else may write in it, as the launcher makes a
    report's (MakeOwnFolder): others may read it."""
    return _folder_of_mine(folder, 0o055)


def create_private_file(path: str) -> int:
    """A new file at PATH (0600), opened read-write: never through a link, never someone else's.
    A file of this user's already there (an earlier process of the same pid, not yet pruned) is
    replaced; anything else there raises."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o600)
    except FileExistsError:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise
        os.unlink(path)
        return os.open(path, flags, 0o600)
