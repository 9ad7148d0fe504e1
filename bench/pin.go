package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/dlock-go/dlock/internal/redistest"
)

// onOneCPU runs fn with every thread of the bench process and of the
// redis-server behind admin on one CPU, the first this process may use,
// and then gives each thread back the CPUs it had.
//
// Why: with one goroutine locking and unlocking, the server's CPU per
// cycle is bimodal on this machine. The same script pair, in blocks of
// 1,000 cycles, cost the server 11-12 µs per cycle when the scheduler put
// the client and the server on one CPU and 46-55 µs when it put them on
// two (one wakeup of an idle CPU per request); which one a block gets is
// up to the scheduler, so two identical clients in one run differed by up
// to 30%. Pinned to one CPU, four identical clients agreed within 2%,
// and what is left is the work each library asks of the server.
func onOneCPU(admin *redis.Client, fn func()) error {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		return err
	}
	cpu := -1
	for i := 0; i < len(mine)*64 && cpu < 0; i++ {
		if mine.IsSet(i) {
			cpu = i
		}
	}
	server, err := strconv.Atoi(redistest.Info(admin, "server")["process_id"])
	if err != nil {
		return fmt.Errorf("the server's pid: %w", err)
	}
	var theirs unix.CPUSet
	if err := unix.SchedGetaffinity(server, &theirs); err != nil {
		return err
	}
	var one unix.CPUSet
	one.Set(cpu)
	defer func() {
		_ = setThreads(os.Getpid(), &mine)
		_ = setThreads(server, &theirs)
	}()
	if err := setThreads(server, &one); err != nil {
		return err
	}
	if err := setThreads(os.Getpid(), &one); err != nil {
		return err
	}
	fn()
	return nil
}

// setThreads sets the CPU affinity of every thread of process pid. (A
// thread made later inherits its maker's.)
func setThreads(pid int, set *unix.CPUSet) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}
