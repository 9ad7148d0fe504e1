package dlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestWithOwnerShowsWhoHoldsALockAndSince(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	before := time.Now()
	l := mustLock(t, c, k, dlock.WithOwner(dlock.Owner{Label: "nightly report"}))
	st, err := c.Inspect(ctxT(t), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Owners) != 1 {
		t.Fatalf("Owners = %+v, want one", st.Owners)
	}
	o := st.Owners[0]
	host, _ := os.Hostname()
	if o.Label != "nightly report" || o.PID != os.Getpid() || o.Host != host || o.Program == "" || o.Holder != st.Holder {
		t.Fatalf("owner %+v, want the label, this process's host, pid and program, and holder %q", o, st.Holder)
	}
	if o.Since.Before(before.Add(-time.Second)) || o.Since.After(time.Now()) {
		t.Fatalf("Since = %v, want when the lock was taken (%v)", o.Since, before)
	}
	// The record never holds the token.
	for _, v := range rdb.HVals(ctxT(t), "dlock:owner:{"+k+"}").Val() {
		if strings.Contains(v, l.Token()[:12]) {
			t.Fatalf("the owner record %q holds the token", v)
		}
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record goes with the hold", func() bool {
		return rdb.HLen(ctxT(t), "dlock:owner:{"+k+"}").Val() == 0
	})
}

func TestWithoutOwnerNothingIsRecorded(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k)
	st, err := c.Inspect(ctxT(t), k)
	if err != nil || len(st.Owners) != 0 {
		t.Fatalf("Inspect = %+v, %v; want no owners", st, err)
	}
	if n := rdb.Exists(ctxT(t), "dlock:owner:{"+k+"}").Val(); n != 0 {
		t.Fatal("an owner key exists without WithOwner")
	}
}

// A hand-off's new holder shows its own record, not the one before it; a
// semaphore shows one record per permit; a holder that died is dropped
// with its lease; a renewed hold keeps its record past its first TTL.
func TestOwnerRecordsFollowTheHolds(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	a := mustLock(t, c, k, dlock.WithOwner(dlock.Owner{Label: "a"}))
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctxT(t), k, dlock.WithOwner(dlock.Owner{Label: "b"}))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "b waits", func() bool { st, err := c.Inspect(ctxT(t), k); return err == nil && st.Waiters == 1 })
	a.Unlock(ctxT(t))
	b := <-got
	st, err := c.Inspect(ctxT(t), k)
	if err != nil || len(st.Owners) != 1 || st.Owners[0].Label != "b" {
		t.Fatalf("after the hand-off: %+v, %v; want b's record alone", st.Owners, err)
	}
	b.Unlock(ctxT(t))

	sk := key(t)
	sem := c.Semaphore(sk, 3)
	var permits []*dlock.Lock
	for _, label := range []string{"p1", "p2"} {
		p, err := sem.TryAcquire(ctxT(t), dlock.WithOwner(dlock.Owner{Label: label}))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	// A third holder that stops renewing (its process died, say): its
	// record lapses with its lease.
	_, err = sem.TryAcquire(ctxT(t), dlock.WithOwner(dlock.Owner{Label: "gone"}), dlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead holder's record lapses", func() bool {
		st, err := c.Inspect(ctxT(t), sk)
		if err != nil || len(st.Owners) != 2 {
			return false
		}
		labels := st.Owners[0].Label + "," + st.Owners[1].Label
		return labels == "p1,p2" || labels == "p2,p1"
	})
	for _, p := range permits {
		p.Unlock(ctxT(t))
	}

	rk := key(t)
	r := mustLock(t, c, rk, dlock.WithOwner(dlock.Owner{Label: "renewed"}), dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew())
	time.Sleep(time.Second)
	st, err = c.Inspect(ctxT(t), rk)
	if err != nil || len(st.Owners) != 1 || st.Owners[0].Label != "renewed" {
		t.Fatalf("a renewed hold after three TTLs: %+v, %v; want its record", st.Owners, err)
	}
	r.Unlock(ctxT(t))
}

func TestAnOwnerTooLargeIsRefusedBeforeAnythingIsLocked(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	_, err := c.TryLock(context.Background(), k, dlock.WithOwner(dlock.Owner{Label: strings.Repeat("x", 2000)}))
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("TryLock with a 2000-byte label: %v, want ErrInvalidArgument", err)
	}
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Fatal("the lock was taken")
	}
}
