"""How the simulator writes files that running agents read at the same time.

Two kinds of readers, two ways of writing:

* sysfs and procfs files (counters, port state, /proc/net/snmp): the collectors open them once
  per discovery and re-read them with pread(2) (ib_sysfs, netdev), exactly as the kernel allows.
  Replacing such a file (write a temporary file, rename it over) would leave the agent reading the
  old inode forever, so they are rewritten IN PLACE with one pwrite(2) at offset 0. To keep that
  single write self-contained, a file never shrinks: a shorter value is padded with blanks before
  its final newline ("0      \\n"), which every parser strips. A concurrent reader therefore sees
  either the old or the new bytes, never an empty or truncated file.

* files a reader opens afresh on every read (the ethtool capture directory of
  EthtoolCollectorConfig.stats_dir, the NVML stand-in's state file, which the stand-in re-reads
  when its inode, size or mtime changes): replaced ATOMICALLY, a temporary file in the same
  directory renamed over the old one, so a reader never sees a half-written file.

Python 3 standard library only.
"""

import os


class InPlaceFile:
    """A file rewritten in place (same inode) with one pwrite per update."""

    __slots__ = ("path", "fd", "size")

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.size = os.fstat(self.fd).st_size

    def write(self, text):
        data = text.encode()
        if len(data) < self.size:
            pad = b" " * (self.size - len(data))
            data = data[:-1] + pad + b"\n" if data.endswith(b"\n") else data + pad
        os.pwrite(self.fd, data, 0)
        self.size = max(self.size, len(data))

    def close(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class FileWriter:
    """Caches open in-place files; writes only what changed since the last write."""

    def __init__(self):
        self._files = {}
        self._last = {}
        self.writes = 0
        # Before any agent runs, files are created at their exact size (no padding needed).
        self.fresh = True

    def inplace(self, path, text):
        """Rewrites `path` in place if `text` differs from what was last written there."""
        if self._last.get(path) == text:
            return False
        f = self._files.get(path)
        if f is None:
            if self.fresh:
                write_new(path, text)
            f = self._files[path] = InPlaceFile(path)
        f.write(text)
        self._last[path] = text
        self.writes += 1
        return True

    def atomic(self, path, text):
        """Replaces `path` (temporary file + rename) if `text` differs from the last write."""
        if self._last.get(path) == text:
            return False
        write_atomic(path, text)
        self._last[path] = text
        self.writes += 1
        return True

    def close(self):
        for f in self._files.values():
            f.close()
        self._files.clear()


def write_atomic(path, text):
    """Writes `text` to a temporary file next to `path` and renames it over `path`."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.tmp%d" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_new(path, text):
    """Creates (or truncates) a file during generation, before any reader exists."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
