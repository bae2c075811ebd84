"""moto's server as a child that cannot outlive the gpuforge that started it.

`python -m gpuforge.images.emulator_server PARENT_PID [moto.server arguments]`.
The emulator runs in its own session, so a terminal's signals do not reach it,
and a SIGKILLed gpuforge runs no cleanup at all. On Linux the child therefore
asks the kernel for SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG,
prctl(2)); elsewhere a thread watches the parent id. Either way the server
stops within a moment of the build that owns it, however that build ended.

prctl(2) notes that the signal follows the death of the parent *thread*: the
emulator is started from the main thread (`LocalAws` in a `with` block), whose
end is the end of gpuforge.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

# <linux/prctl.h>: #define PR_SET_PDEATHSIG 1
PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.2


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def tie_to_parent(parent: int) -> None:
    """Arrange SIGTERM for this process when `parent` exits; exit now if it already has."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if libc_name is not None:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    # The parent may have died before the request above: then no signal will come.
    if os.getppid() != parent:
        sys.exit(f"gpuforge emulator: parent {parent} exited before the server started")


def main() -> None:
    parent = int(sys.argv[1])
    tie_to_parent(parent)
    from moto.server import main as moto_main

    moto_main(sys.argv[2:])


if __name__ == "__main__":
    main()
