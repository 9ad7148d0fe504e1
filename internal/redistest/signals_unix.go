//go:build unix

package redistest

import "syscall"

// The signals that pause and resume a server (Pause, Resume).
const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// runAs sets the process attributes attr (made if nil) to run as uid and gid.
func runAs(attr *syscall.SysProcAttr, uid, gid int) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return attr
}
