package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// onOneCPU runs fn with every thread of the bench process and of the
// redis-server process server on one CPU, the first this process may use,
// and then gives each thread back the CPUs its process had. (main turns
// off the runtime's own GOMAXPROCS updates, which would otherwise follow
// the pinning down to 1 within a second, and back up only a second after
// the scenario.)
//
// Why: with one goroutine locking and unlocking, the server's CPU per
// cycle is bimodal on this machine. The same script pair, in blocks of
// 1,000 cycles, cost the server 11-12 µs per cycle when the scheduler put
// the client and the server on one CPU and 46-55 µs when it put them on
// two (one wakeup of an idle CPU per request); which one a block gets is
// up to the scheduler, so two identical clients in one run differed by up
// to 30%. Pinned to one CPU, four identical clients agreed within 2%,
// and what is left is the work each library asks of the server.
func onOneCPU(server int, fn func()) (err error) {
	var mine, theirs unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		return err
	}
	if err := unix.SchedGetaffinity(server, &theirs); err != nil {
		return err
	}
	var one unix.CPUSet
	for i := 0; i < 64*len(mine); i++ { // CPUSet.IsSet is bounds-checked
		if mine.IsSet(i) {
			one.Set(i)
			break
		}
	}
	defer func() {
		err = errors.Join(err, setThreads(os.Getpid(), &mine), setThreads(server, &theirs))
	}()
	if err := errors.Join(setThreads(server, &one), setThreads(os.Getpid(), &one)); err != nil {
		return err
	}
	fn()
	return nil
}

// setThreads sets the CPU affinity of every thread of process pid. A
// thread inherits its maker's affinity, so one made while the threads are
// being set may have the old one: the threads are listed again until no
// new one turns up.
func setThreads(pid int, set *unix.CPUSet) error {
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		more := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			more, done[tid] = true, true
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return err
			}
		}
		if !more {
			return nil
		}
	}
}
