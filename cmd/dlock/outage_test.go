package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// dlockOn returns the binary with args, with $DLOCK_REDIS pointing at s.
func dlockOn(s *redistest.Server, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS=redis://"+s.Addr())
	return cmd
}

// started is a command running in the background, with its output.
type started struct {
	name           string
	cmd            *exec.Cmd
	mu             sync.Mutex // guards stdout while the command runs
	stdout, stderr bytes.Buffer
	done           chan error
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (lw lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

func start(t *testing.T, name string, cmd *exec.Cmd) *started {
	t.Helper()
	st := &started{name: name, cmd: cmd, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = lockedWriter{&st.mu, &st.stdout}, lockedWriter{&st.mu, &st.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	go func() { st.done <- cmd.Wait() }()
	return st
}

// pid returns the pid the command's child printed first.
func (st *started) pid(t *testing.T) int {
	t.Helper()
	var pid int
	waitUntil(t, st.name+" prints its child's pid", func() bool {
		line, _, ok := strings.Cut(st.output(), "\n")
		pid, _ = strconv.Atoi(line)
		return ok && pid > 0
	})
	return pid
}

// output returns what the command printed so far.
func (st *started) output() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stdout.String()
}

// errOutput returns what the command printed to its stderr so far (it may
// still be writing: the command's end is not waited for).
func (st *started) errOutput() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stderr.String()
}

// exit waits for the command's end and returns its exit code.
func (st *started) exit(t *testing.T) int {
	t.Helper()
	select {
	case err := <-st.done:
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("%s: %v", st.name, err)
	case <-time.After(time.Minute):
		t.Fatalf("%s: still running after a minute; stderr: %s", st.name, st.errOutput())
	}
	return -1
}

// ranAt is a command that prints "ran" and the time, in ns.
const ranAt = "echo ran $(date +%s%N)"

// The first case for the command: run --wait, run --permits and
// elect wait behind holders; Redis is down for 4 s and comes back empty.
// Each command waits through the outage and runs its command once Redis
// is back, well within its 30 s.
func TestTheCommandWaitsThroughARestart(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	ctx := context.Background()
	k := key(t)
	if _, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore(k+":sem", 1).TryAcquire(ctx, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Election(k+":elect").Campaign(ctx, "holder", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	cmds := []*started{
		start(t, "run --wait", dlockOn(s, "run", "--key", k, "--wait", "30s", "--", "sh", "-c", ranAt)),
		start(t, "run --permits", dlockOn(s, "run", "--key", k+":sem", "--permits", "1", "--wait", "30s", "--", "sh", "-c", ranAt)),
		start(t, "elect", dlockOn(s, "elect", "--key", k+":elect", "--wait", "30s", "--", "sh", "-c", ranAt)),
	}
	for _, kk := range []string{k, k + ":sem", k + ":elect"} {
		waitUntil(t, kk+"'s waiter queues", func() bool {
			st, err := c.Inspect(ctx, kk)
			return err == nil && st.Waiters == 1
		})
	}
	s.Kill()
	time.Sleep(4 * time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	for _, st := range cmds {
		code := st.exit(t)
		ns, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(st.output()), "ran "), 10, 64)
		if code != 0 || err != nil {
			t.Fatalf("%s across the restart: exit %d, stdout %q, stderr %q", st.name, code, st.output(), st.errOutput())
		}
		t.Logf("%s: its command ran %v after Redis was back", st.name, time.Unix(0, ns).Sub(back).Round(time.Millisecond))
	}
}

// dlock run keeps its command running through an outage its lease
// outlasts (a restart that keeps the key), and stops it, exiting "lost",
// once an outage outlasts the lease (a paused server): the command never
// runs on after the lock may have lapsed.
func TestRunKeepsItsCommandOnlyWhileItsLeaseHolds(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	k := key(t)
	run := start(t, "run", dlockOn(s, "run", "--key", k, "--ttl", "3s", "--", "sh", "-c", "echo $$; exec sleep 120"))
	r := s.Client(t)
	ctx := context.Background()
	waitUntil(t, "dlock run takes the lock", func() bool { return r.Exists(ctx, k).Val() == 1 })
	child := run.pid(t)
	s.Kill()
	time.Sleep(time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // more than the TTL: renewals went on after the restart
	select {
	case err := <-run.done:
		t.Fatalf("dlock run ended across a restart its lease outlasted: %v; stderr %q", err, run.errOutput())
	default:
	}
	if r.Exists(ctx, k).Val() != 1 {
		t.Fatal("the key is gone while dlock run's command runs")
	}
	s.Pause()
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			s.Resume()
		}
	}()
	// Past the TTL the key has expired on the server's clock: once Redis
	// answers again, anyone may take the lock. The command must be gone
	// by then, or two would run at once.
	for time.Since(paused) < 4*time.Second {
		if syscall.Kill(child, 0) != nil {
			t.Logf("the command was stopped %v after Redis stopped answering (TTL 3s)", time.Since(paused).Round(time.Millisecond))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(4*time.Second - time.Since(paused))
	s.Resume()
	resumed = true
	other := dlock.New(r)
	defer other.Close()
	l, err := other.Lock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if syscall.Kill(child, 0) == nil {
		t.Fatal("another holder obtained the lock while dlock run's command still ran")
	}
	if code := run.exit(t); code != exitLost || !strings.Contains(run.errOutput(), "lost") {
		t.Fatalf("dlock run after an outage longer than its lease: exit %d, stderr %q; want %d, lost", code, run.errOutput(), exitLost)
	}
}
