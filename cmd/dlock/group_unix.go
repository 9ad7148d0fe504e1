//go:build unix

package main

import "syscall"

// signalGroup sends sig to the process group pgid (CMD's: guardCommand).
func signalGroup(pgid int, sig syscall.Signal) error { return syscall.Kill(-pgid, sig) }

// groupAttr puts a command in a process group of its own.
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
