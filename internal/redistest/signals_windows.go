package redistest

import "syscall"

// Windows has neither SIGSTOP nor SIGCONT: Pause and Resume do nothing
// there (the tests, which need them, run on Linux; this package builds
// for the dlock command's Windows binary).
const sigStop, sigCont = syscall.Signal(0), syscall.Signal(0)

// runAs leaves attr as it is: Windows runs a process as its parent's user.
func runAs(attr *syscall.SysProcAttr, _, _ int) *syscall.SysProcAttr { return attr }
