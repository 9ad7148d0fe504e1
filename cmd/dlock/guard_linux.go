package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
)

// The command dies with dlock. 'dlock run' starts CMD under a guardian:
// this binary again ("run-guard"), at the head of CMD's process group. The
// kernel sends the guardian SIGUSR2 when dlock dies, however it dies
// (PR_SET_PDEATHSIG; kill -9 included), and the guardian then kills the
// whole group with SIGKILL: CMD and everything it started, so that nothing
// goes on running without the lock. Signals dlock passes on reach the
// whole group as before; the guardian ignores them and exits with CMD's
// status.

// guarded reports whether this system kills CMD when dlock dies.
const guarded = true

// guardCommand returns the command that runs args under the guardian.
func guardCommand(args []string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"run-guard", "--"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGUSR2}
	return cmd, nil
}

// startGuarded starts cmd from a thread that stays alive until cmd has
// exited: the parent-death signal follows the thread that forked, not the
// process. It returns cmd.Wait's result on exited.
func startGuarded(cmd *exec.Cmd) (exited <-chan error, err error) {
	out := make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		out <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return out, nil
}

// guardMain is the guardian: it runs args in its own process group and
// exits with its status; if dlock dies first (SIGUSR2), it kills the group.
func guardMain(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return exitUsage
	}
	// A parent-death signal that came before this (dlock died while the
	// guardian started) killed it by default: CMD had not started.
	died := make(chan os.Signal, 1)
	signal.Notify(died, syscall.SIGUSR2)
	// dlock passes signals on to the whole group: CMD gets them, the
	// guardian only waits for CMD. (Caught, not ignored: an ignored
	// signal would stay ignored in CMD.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	runtime.LockOSThread() // CMD's own parent-death signal follows this thread
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Should the guardian itself be killed, CMD goes with it: dlock would
	// otherwise take the guardian's end for CMD's and release the lock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock: cannot run %s: %v\n", args[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNoExec
		}
		return exitNotRunnable
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-died:
		_ = syscall.Kill(0, syscall.SIGKILL) // the whole group, the guardian too
		return exitLost
	case err := <-exited:
		return exitStatus(err)
	}
}
