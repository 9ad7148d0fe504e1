package torture

import "syscall"

// Windows cannot stop a process and let it go on: the pause scenarios
// pause nothing there (torture runs on Linux in CI; this package builds
// for the dlock command's Windows binary).
const sigStop, sigCont = syscall.Signal(0), syscall.Signal(0)
