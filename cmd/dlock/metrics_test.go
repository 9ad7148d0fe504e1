package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scrapeUntil scrapes addr's /metrics until the body holds every one of
// want, failing the test after a generous deadline.
func scrapeUntil(t *testing.T, addr string, want ...string) {
	t.Helper()
	var body string
	waitUntil(t, "the metrics "+strings.Join(want, ", "), func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
}

// dlock run's metrics are labelled with its --key, show the hold while
// the command runs, and, with --metrics-linger, stay served after the
// release, so that a scrape sees its hold time and result; a signal ends
// the linger, and the exit status is still the command's.
func TestRunMetricsAreLabelledByKeyAndShowTheHold(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	k := key(t)
	done := filepath.Join(t.TempDir(), "done")
	cmd := dlockCmd("run", "--key", k, "--metrics-addr", addr, "--metrics-linger", "5m", "--",
		"sh", "-c", "while [ ! -e "+done+" ]; do sleep 0.05; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	label := `lock="` + k + `",primitive="lock"`
	scrapeUntil(t, addr, `dlock_acquires_total{`+label+`,result="obtained"} 1`, `dlock_holds{`+label+`} 1`)
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	scrapeUntil(t, addr, `dlock_releases_total{`+label+`,result="ok"} 1`, `dlock_hold_seconds_count{`+label+`} 1`, `dlock_holds{`+label+`} 0`)
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("dlock run exited %d after a signal during the linger, want the command's 0", ee.ExitCode())
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a signal did not end the linger")
	}
}
