package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyspace"
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
	if o.Program != "dlock run" || o.Label != "sleep" || o.PID != run.cmd.Process.Pid || o.Host == "" || o.Holder != st.Holder {
		t.Fatalf("owner %+v, want dlock run's pid %d, program and command's name, and holder %q", o, run.cmd.Process.Pid, st.Holder)
	}
	human, _ := dlockOn(s, "status", k).Output()
	if !strings.Contains(string(human), `dlock run "sleep", held `) {
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

// The command line of dlock run may hold secrets (a password in a URL, an
// environment assignment): by default only the command's name reaches
// Redis, where status, the console and a revocation's audit entry read it;
// --label-args adds the arguments with URL passwords and secret-looking
// assignments masked, and --label replaces it all.
func TestRunKeepsItsCommandLinesSecretsOutOfRedis(t *testing.T) {
	secrets := []string{"hunter2-secret", "S3cr3t"}
	cmdLine := []string{"--", "sh", "-c", "sleep 30", "PGPASSWORD=hunter2-secret", "mysql://root:S3cr3t@db/prod"}
	for _, tc := range []struct {
		flags []string
		label string
	}{
		{nil, "sh"},
		{[]string{"--label-args"}, "sh -c sleep 30 PGPASSWORD=xxxxx mysql://root:xxxxx@db/prod"},
		{[]string{"--label", "nightly backup"}, "nightly backup"},
	} {
		s := redistest.Start(t)
		rdb := s.Client(t)
		ctx := context.Background()
		k := key(t)
		args := append(append([]string{"run", "--key", k}, tc.flags...), cmdLine...)
		start(t, "run", dlockOn(s, args...))
		ownerKey := keyspace.Owner(k)
		waitUntil(t, "dlock run records its owner", func() bool { return rdb.Exists(ctx, ownerKey).Val() == 1 })
		c := dlock.New(rdb)
		if _, err := c.Revoke(ctx, k, dlock.Revocation{By: "test", Reason: "audit", Grace: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		c.Close()
		raw := fmt.Sprint(rdb.HGetAll(ctx, ownerKey).Val(), rdb.XRange(ctx, keyspace.Audit, "-", "+").Val())
		for _, secret := range secrets {
			if strings.Contains(raw, secret) {
				t.Errorf("%v: %q reached Redis: %s", tc.flags, secret, raw)
			}
		}
		if !strings.Contains(raw, tc.label) {
			t.Errorf("%v: the owner record and audit entry %s, want the label %q", tc.flags, raw, tc.label)
		}
	}
}
