//go:build unix

package torture

import "syscall"

// The signals that pause and resume a client process (pauseHolder,
// pauseWaiter).
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
