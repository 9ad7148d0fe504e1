package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dlock elect runs one command at a time across candidates; a standby
// takes over when the leader's process is killed outright; dlock leader
// says who leads, and --watch prints each change.
func TestElectRunsOneLeaderAndAStandbyTakesOver(t *testing.T) {
	k := key(t)
	if code, out, _ := run(t, "leader", k); code != exitFree || !strings.Contains(out, "no leader") {
		t.Fatalf("leader before any campaign: exit %d, %q", code, out)
	}
	watch := dlockCmd("leader", "--watch", k)
	wout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Process.Kill()
	lines := bufio.NewScanner(wout)
	nextLine := func() string {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			} else {
				got <- "<eof>"
			}
		}()
		select {
		case l := <-got:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("leader --watch printed nothing within 30s")
		}
		return ""
	}
	if l := nextLine(); !strings.Contains(l, "no leader") {
		t.Fatalf("first --watch line %q", l)
	}

	start := func(value string) *exec.Cmd {
		cmd := dlockCmd("elect", "--key", k, "--value", value, "--ttl", "1s", "--", "sh", "-c", "echo $DLOCK_FENCE; sleep 60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	a := start("a")
	if l := nextLine(); !strings.Contains(l, `"a"`) {
		t.Fatalf("--watch printed %q, want a as leader", l)
	}
	start("b")
	time.Sleep(200 * time.Millisecond) // b campaigns (it waits in line either way)
	if code, out, _ := run(t, "leader", "--json", k); code != 0 || !strings.Contains(out, `"value":"a"`) {
		t.Fatalf("leader --json: exit %d, %q", code, out)
	}
	// Kill the leader's dlock and its command outright.
	syscall.Kill(-a.Process.Pid, syscall.SIGKILL)
	for {
		l := nextLine()
		if strings.Contains(l, `"b"`) {
			break
		}
		if !strings.Contains(l, "no leader") {
			t.Fatalf("--watch printed %q, want the lapse or b", l)
		}
	}
}

// A leadership lost while the command runs stops it, and elect exits 76.
func TestElectExitsLostWhenLeadershipIsLost(t *testing.T) {
	k := key(t)
	cmd := dlockCmd("elect", "--key", k, "--ttl", "600ms", "--kill-after", "2s", "--", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := rdb(t)
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for r.Exists(ctx, k).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("dlock elect was never elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.Set(ctx, k, "someone-else", time.Minute)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
			t.Fatalf("dlock elect ended with %v, want exit %d", err, exitLost)
		}
	case <-time.After(45 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the command kept running after the leadership was lost")
	}
}

// dlock run --permits N runs at most N copies at once.
func TestRunWithPermitsRunsAtMostNAtOnce(t *testing.T) {
	k := key(t)
	dir := t.TempDir()
	script := `touch "$0/$$"; ls "$0" | wc -l >> "$0.log"; sleep 0.2; rm "$0/$$"`
	done := make(chan int, 6)
	for range 6 {
		go func() {
			code, _, stderr := run(t, "run", "--key", k, "--permits", "2", "--", "sh", "-c", script, dir)
			if code != 0 {
				t.Errorf("dlock run --permits 2 exited %d: %s", code, stderr)
			}
			done <- code
		}()
	}
	for range 6 {
		<-done
	}
	data, err := os.ReadFile(dir + ".log")
	if err != nil {
		t.Fatal(err)
	}
	counts := strings.Fields(string(data))
	if len(counts) != 6 {
		t.Fatalf("%d runs logged, want 6: %q", len(counts), counts)
	}
	for _, c := range counts {
		if c != "1" && c != "2" {
			t.Fatalf("%s copies ran at once with --permits 2: %q", c, counts)
		}
	}
	if code, _, stderr := run(t, "run", "--key", k, "--permits", "3", "--wait", "0", "--", "true"); code != 0 {
		t.Fatalf("a free semaphore with other permits: exit %d %s", code, stderr)
	}
	if code, _, _ := run(t, "run", "--key", k, "--permits", "-1", "--", "true"); code != exitUsage {
		t.Fatalf("--permits -1: exit %d, want %d", code, exitUsage)
	}
}

// dlock status says what kind of lock holds a key.
func TestStatusOfASemaphoreAndAnElection(t *testing.T) {
	k := key(t)
	hold := dlockCmd("run", "--key", k, "--permits", "3", "--", "sleep", "30")
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { hold.Process.Signal(syscall.SIGTERM); hold.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ := run(t, "status", k)
		if code == 0 {
			if !strings.Contains(out, "semaphore, 1 of 3 permits") {
				t.Fatalf("status of a semaphore: %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the semaphore was never taken")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
