package main

import (
	"os"
	"os/exec"
	"syscall"
)

// guarded: Windows has no parent-death signal here: if dlock is killed
// outright, CMD goes on without the lock, which expires by its TTL.
const guarded = false

// guardCommand returns the command for args. Windows has no process
// groups to signal: run stops CMD alone (signalGroup).
func guardCommand(args []string) (*exec.Cmd, error) {
	return exec.Command(args[0], args[1:]...), nil
}

// startGuarded starts cmd and returns cmd.Wait's result on exited.
func startGuarded(cmd *exec.Cmd) (exited <-chan error, err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	out := make(chan error, 1)
	go func() { out <- cmd.Wait() }()
	return out, nil
}

func guardMain([]string) int { return exitUsage }

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
