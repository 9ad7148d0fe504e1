//go:build !linux

package main

import "os/exec"

// guarded reports whether this system kills CMD when dlock dies: not here
// (no parent-death signal). If dlock is killed outright, CMD goes on
// without the lock, which expires by its TTL.
const guarded = false

// guardCommand returns the command for args, in its own process group
// where the system has them (groupAttr).
func guardCommand(args []string) (*exec.Cmd, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = groupAttr()
	return cmd, nil
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
