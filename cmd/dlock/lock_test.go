package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// A signal to `dlock lock --wait` ends the wait as it does for run and
// elect: the waiter leaves the queue, says it was interrupted (in --json
// too) and exits 130.
func TestLockWaitInterruptedBySignalLeavesTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		asJSON bool
	}{
		{"SIGINT", syscall.SIGINT, false},
		{"SIGTERM", syscall.SIGTERM, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(t)
			c := dlock.New(rdb(t))
			defer c.Close()
			ctx := context.Background()
			held, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(ctx)
			args := []string{"lock", "--key", k, "--wait", "5m"}
			if tc.asJSON {
				args = append(args, "--json")
			}
			cmd := dlockCmd(args...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			waitUntil(t, "dlock lock to queue", func() bool {
				st, err := c.Inspect(ctx, k)
				return err == nil && st.Waiters == 1
			})
			cmd.Process.Signal(tc.sig)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var werr error
			select {
			case werr = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("dlock lock did not end after %v", tc.sig)
			}
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.ExitCode() != 130 {
				t.Fatalf("dlock lock ended with %v (stderr %q), want exit 130", werr, errb.String())
			}
			if !strings.Contains(errb.String(), "interrupted") {
				t.Errorf("stderr %q does not say it was interrupted", errb.String())
			}
			if tc.asJSON {
				var res lockResult
				if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Result != "interrupted" {
					t.Errorf("--json printed %q (%v), want result interrupted", out.String(), err)
				}
			}
			waitUntil(t, "the interrupted waiter to leave the queue", func() bool {
				st, err := c.Inspect(ctx, k)
				return err == nil && st.Waiters == 0
			})
			if code, out, _ := run(t, "status", k); code != 0 || strings.Contains(out, "waiting") {
				t.Errorf("status after the interrupt: exit %d, %q", code, out)
			}
		})
	}
}

// waitUntil polls cond until it holds, failing the test after a generous
// deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
