package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server if the process that started
// it dies, so that a crashed test run leaves no servers behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
