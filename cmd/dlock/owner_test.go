package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// dlock run leaves an owner record beside its hold, and status shows it:
// which process, running what, for how long; never the token.
func TestStatusShowsWhoRunsUnderALock(t *testing.T) {
	s := redistest.Start(t)
	k := key(t)
	run := start(t, "run", dlockOn(s, "run", "--key", k, "--", "sleep", "30"))
	waitUntil(t, "dlock run takes the lock", func() bool { return s.Client(t).Exists(context.Background(), k).Val() == 1 })
	var st statusResult
	waitUntil(t, "status shows the owner", func() bool {
		out, err := dlockOn(s, "status", "--json", k).Output()
		if err != nil && !isExit(err) {
			t.Fatal(err)
		}
		return json.Unmarshal(out, &st) == nil && len(st.Owners) == 1
	})
	o := st.Owners[0]
	if o.Program != "dlock run" || o.Label != "sleep 30" || o.PID != run.cmd.Process.Pid || o.Host == "" || o.Holder != st.Holder {
		t.Fatalf("owner %+v, want dlock run's pid %d, program and command, and holder %q", o, run.cmd.Process.Pid, st.Holder)
	}
	human, _ := dlockOn(s, "status", k).Output()
	if !strings.Contains(string(human), `dlock run "sleep 30", held `) {
		t.Fatalf("status says %q, want the owner's line", human)
	}
	token := s.Client(t).Get(context.Background(), k).Val()
	if strings.Contains(string(human), token[:12]) {
		t.Fatalf("status printed the token: %q", human)
	}
}

// isExit reports whether err is only a non-zero exit.
func isExit(err error) bool {
	_, ok := err.(*exec.ExitError)
	return ok
}
