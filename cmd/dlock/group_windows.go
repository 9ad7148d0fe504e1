package main

import (
	"os"
	"syscall"
)

// groupAttr: Windows has no process groups to signal; run stops CMD alone
// (signalGroup).
func groupAttr() *syscall.SysProcAttr { return nil }

// signalGroup ends the process pgid on SIGTERM or SIGKILL: Windows delivers
// no other signal to a process, and ends one only outright.
func signalGroup(pgid int, sig syscall.Signal) error {
	if sig != syscall.SIGTERM && sig != syscall.SIGKILL {
		return nil
	}
	p, err := os.FindProcess(pgid)
	if err != nil {
		return err
	}
	return p.Kill()
}
