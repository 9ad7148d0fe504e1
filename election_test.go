package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// next receives from an Observe channel within a generous deadline.
func next(t *testing.T, ch <-chan dlock.Leader) dlock.Leader {
	t.Helper()
	select {
	case ld, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed early")
		}
		return ld
	case <-time.After(20 * time.Second):
		t.Fatal("no leader change within 20s")
	}
	return dlock.Leader{}
}

// The leader is who campaigned first; a standby takes over when it
// resigns, with a higher term; an observer sees each change.
func TestAStandbyTakesOverWhenTheLeaderResigns(t *testing.T) {
	a, _ := newClient(t, shared())
	b, _ := newClient(t, shared())
	k := key(t)
	if _, err := a.Election(k).Leader(ctxT(t)); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	obs := b.Election(k).Observe(ctxT(t)).C
	if ld := next(t, obs); ld != (dlock.Leader{}) {
		t.Fatalf("first observation %+v, want nobody", ld)
	}
	first, err := a.Election(k).Campaign(ctxT(t), "host-a")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := b.Election(k).Leader(ctxT(t))
	if err != nil || ld.Value != "host-a" || ld.Term != first.Fence() {
		t.Fatalf("Leader: %+v %v, want host-a at term %d", ld, err, first.Fence())
	}
	if got := next(t, obs); got != ld {
		t.Fatalf("observed %+v, want %+v", got, ld)
	}
	elected := make(chan *dlock.Lock, 1)
	go func() {
		l, err := b.Election(k).Campaign(ctxT(t), "host-b")
		if err != nil {
			t.Error(err)
		}
		elected <- l
	}()
	eventually(t, "the standby queued", func() bool { st, _ := a.Inspect(ctxT(t), k); return st.Waiters == 1 })
	if err := first.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	second := <-elected
	if second == nil {
		t.FailNow()
	}
	if second.Fence() <= first.Fence() {
		t.Fatalf("term %d after term %d", second.Fence(), first.Fence())
	}
	// The observer may see the moment between the two, or not.
	got := next(t, obs)
	if got == (dlock.Leader{}) {
		got = next(t, obs)
	}
	if got.Value != "host-b" || got.Term != second.Fence() {
		t.Fatalf("observed %+v, want host-b at term %d", got, second.Fence())
	}
	if err := second.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := next(t, obs); got != (dlock.Leader{}) {
		t.Fatalf("after the resignation, observed %+v, want nobody", got)
	}
}

// A leader whose process dies (its Client closed without resigning) lapses
// within its TTL: the observer sees nobody, and the queued standby is
// elected.
func TestADeadLeaderLapsesAndTheStandbyIsElected(t *testing.T) {
	a, _ := newClient(t, shared())
	b, _ := newClient(t, shared())
	k := key(t)
	first, err := a.Election(k).Campaign(ctxT(t), "a", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	obs := b.Election(k).Observe(ctxT(t)).C
	if ld := next(t, obs); ld.Value != "a" {
		t.Fatalf("observed %+v, want a", ld)
	}
	elected := make(chan *dlock.Lock, 1)
	go func() {
		l, _ := b.Election(k).Campaign(ctxT(t), "b", dlock.WithTTL(time.Second))
		elected <- l
	}()
	eventually(t, "the standby queued", func() bool { st, _ := b.Inspect(ctxT(t), k); return st.Waiters == 1 })
	a.Close() // stops the watchdog; the key stays until its TTL
	select {
	case <-first.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the dead leader's Context did not end")
	}
	second := <-elected
	if second == nil || second.Fence() <= first.Fence() {
		t.Fatalf("standby's leadership %v after term %d", second, first.Fence())
	}
	for {
		ld := next(t, obs)
		if ld.Value == "b" {
			if ld.Term != second.Fence() {
				t.Fatalf("observed term %d, want %d", ld.Term, second.Fence())
			}
			break
		}
	}
	second.Unlock(ctxT(t))
}

// Many candidates campaigning and resigning: one leader at a time, and
// every term above the one before it.
func TestOneLeaderPerTermAndTermsIncrease(t *testing.T) {
	k := key(t)
	const candidates, terms = 6, 60
	var (
		mu      sync.Mutex
		last    int64
		leaders atomic.Int32
		left    atomic.Int32
		wg      sync.WaitGroup
	)
	left.Store(terms)
	for i := range candidates {
		c, _ := newClient(t, shared())
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := c.Election(k)
			for left.Add(-1) >= 0 {
				l, err := e.Campaign(ctxT(t), fmt.Sprint("c", i))
				if err != nil {
					t.Error(err)
					return
				}
				if leaders.Add(1) != 1 {
					t.Error("two leaders at once")
				}
				mu.Lock()
				if l.Fence() <= last {
					t.Errorf("term %d after %d", l.Fence(), last)
				}
				last = l.Fence()
				mu.Unlock()
				if ld, err := e.Leader(ctxT(t)); err != nil || ld.Term != l.Fence() || ld.Value != fmt.Sprint("c", i) {
					t.Errorf("Leader while leading: %+v %v", ld, err)
				}
				leaders.Add(-1)
				if err := l.Unlock(ctxT(t)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// Redlock: the leader is who holds a majority; Leader and Observe agree.
func TestAnElectionOverRedlock(t *testing.T) {
	c, _ := newRedlock(t, startNodes(t, 3))
	k := key(t)
	l, err := c.Election(k).Campaign(ctxT(t), "r")
	if err != nil {
		t.Fatal(err)
	}
	ld, err := c.Election(k).Leader(ctxT(t))
	if err != nil || ld.Value != "r" || ld.Term != l.Fence() {
		t.Fatalf("Leader: %+v %v, want r at term %d", ld, err, l.Fence())
	}
	obs := c.Election(k).Observe(ctxT(t)).C
	if got := next(t, obs); got != ld {
		t.Fatalf("observed %+v, want %+v", got, ld)
	}
	l.Unlock(ctxT(t))
	if got := next(t, obs); got != (dlock.Leader{}) {
		t.Fatalf("after the resignation, observed %+v", got)
	}
}

func TestElectionBadInputAndWrongKind(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	if _, err := c.Election(k).Campaign(ctxT(t), strings.Repeat("x", 1025)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("a 1025-byte value: %v", err)
	}
	if _, err := c.Election("").Campaign(ctxT(t), "x"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("an empty key: %v", err)
	}
	l := mustLock(t, c, k)
	defer l.Unlock(ctxT(t))
	if _, err := c.Election(k).Leader(ctxT(t)); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("Leader of a plain Lock's key: %v, want ErrWrongKind", err)
	}
	// A campaign with an empty value is a leader with an empty value.
	k2 := key(t)
	e, err := c.Election(k2).Campaign(ctxT(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Unlock(ctxT(t))
	if ld, err := c.Election(k2).Leader(ctxT(t)); err != nil || ld.Value != "" || ld.Term != e.Fence() {
		t.Fatalf("Leader: %+v %v", ld, err)
	}
}

// Observe's channel closes when its context ends and when the Client is
// closed, and Err says which.
func TestObserveEnds(t *testing.T) {
	c, _ := newClient(t, shared())
	ctx, cancel := context.WithCancel(ctxT(t))
	obs := c.Election(key(t)).Observe(ctx)
	next(t, obs.C)
	cancel()
	for range obs.C {
	}
	if err := obs.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the context ended: %v", err)
	}
	obs = c.Election(key(t)).Observe(ctxT(t))
	next(t, obs.C)
	c.Close()
	for range obs.C {
	}
	if err := obs.Err(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Err after Close: %v", err)
	}
}

// Observe of a key no election can use closes its channel at once, with
// the reason: an invalid key, or a key held by a lock or a semaphore.
func TestObserveOfAKeyNoElectionCanUseEndsAtOnce(t *testing.T) {
	c, _ := newClient(t, shared())
	lockKey, semKey := key(t), key(t)
	l := mustLock(t, c, lockKey)
	defer l.Unlock(ctxT(t))
	p, err := c.Semaphore(semKey, 2).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Unlock(ctxT(t))
	for _, tc := range []struct {
		key  string
		want error
	}{{"", dlock.ErrInvalidArgument}, {lockKey, dlock.ErrWrongKind}, {semKey, dlock.ErrWrongKind}} {
		ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
		obs := c.Election(tc.key).Observe(ctx)
		for ld := range obs.C {
			t.Errorf("Observe(%q) sent %+v", tc.key, ld)
		}
		if err := obs.Err(); !errors.Is(err, tc.want) || ctx.Err() != nil {
			t.Errorf("Observe(%q): %v (context: %v), want %v at once", tc.key, err, ctx.Err(), tc.want)
		}
		cancel()
	}
}

// A nil context panics in the caller's goroutine, as the standard
// library's do, not in one of the library's.
func TestObserveWithANilContextPanicsInTheCaller(t *testing.T) {
	c, _ := newClient(t, shared())
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	c.Election(key(t)).Observe(nil) //nolint:staticcheck // the nil is the test
}

// A leader renewed past its TTL plus the fence margin keeps its term: the
// renewals keep the fencing counter.
func TestALongLeadershipKeepsItsTerm(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	l, err := c.Election(k).Campaign(ctxT(t), "v", dlock.WithTTL(300*time.Millisecond), dlock.WithFenceMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctxT(t))
	time.Sleep(1500 * time.Millisecond) // five TTLs, renewed
	if ld, err := c.Election(k).Leader(ctxT(t)); err != nil || ld.Term != l.Fence() {
		t.Fatalf("Leader after five TTLs: %+v %v, want term %d", ld, err, l.Fence())
	}
}

// TryCampaign is one try: elected in a free election, not obtained at once
// where someone leads, the leader unchanged.
func TestTryCampaignIsElectedOnlyInAFreeElection(t *testing.T) {
	a, _ := newClient(t, shared())
	b, _ := newClient(t, shared())
	k := key(t)
	l, err := a.Election(k).TryCampaign(ctxT(t), "host-a")
	if err != nil {
		t.Fatalf("TryCampaign in a free election: %v", err)
	}
	defer l.Unlock(ctxT(t))
	if _, err := b.Election(k).TryCampaign(ctxT(t), "host-b"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryCampaign with a leader: %v, want ErrNotObtained", err)
	}
	if ld, err := b.Election(k).Leader(ctxT(t)); err != nil || ld.Value != "host-a" || ld.Term != l.Fence() {
		t.Fatalf("Leader after a failed try: %+v %v, want host-a at term %d", ld, err, l.Fence())
	}
}
