package prometheus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	dlockprom "github.com/dlock-go/dlock/prometheus"
)

func TestMetricsCountTheLockLifecycle(t *testing.T) {
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	m := dlockprom.New(dlockprom.Options{Classify: func(key string) string {
		if strings.HasPrefix(key, "order:") {
			return "order"
		}
		return "other"
	}})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	c.SetObserver(m.Observe)
	ctx := context.Background()

	l, err := c.TryLock(ctx, "order:1", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "order:1"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err) // not reported: nothing was sent
	}

	want := `
# HELP dlock_acquires_total Lock acquisitions by result: obtained, contended (held by someone else, or the wait ended), error (Redis failed, or too few Redlock nodes answered).
# TYPE dlock_acquires_total counter
dlock_acquires_total{lock="order",primitive="lock",result="contended"} 1
dlock_acquires_total{lock="order",primitive="lock",result="obtained"} 1
# HELP dlock_releases_total Unlocks by result: ok, token_mismatch (the lock had expired; perhaps someone else held it), error.
# TYPE dlock_releases_total counter
dlock_releases_total{lock="order",primitive="lock",result="ok"} 1
# HELP dlock_renewals_total Lease renewals (watchdog or Extend) by result: ok, not_held, error.
# TYPE dlock_renewals_total counter
dlock_renewals_total{lock="order",primitive="lock",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "dlock_acquires_total", "dlock_releases_total", "dlock_renewals_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "dlock_hold_seconds"); n != 1 {
		t.Fatalf("hold histogram series: %d", n)
	}
	if problems, err := testutil.CollectAndLint(m); err != nil || len(problems) > 0 {
		t.Fatal(problems, err)
	}
}

// A wait that ended while too few Redlock nodes answered is an error, not
// contention, though its error matches ErrNotObtained too.
func TestAWaitWithoutAQuorumIsAnError(t *testing.T) {
	m := dlockprom.New(dlockprom.Options{})
	qe := &dlock.QuorumError{OK: 1, Nodes: 3, Quorum: 2}
	for _, err := range []error{
		fmt.Errorf("%w: %w (last attempt: %w)", dlock.ErrNotObtained, context.DeadlineExceeded, qe),
		qe,
	} {
		m.Observe(dlock.Event{Kind: dlock.EventAcquire, Key: "k", Err: err})
	}
	m.Observe(dlock.Event{Kind: dlock.EventAcquire, Key: "k", Err: dlock.ErrNotObtained})
	want := `
# HELP dlock_acquires_total Lock acquisitions by result: obtained, contended (held by someone else, or the wait ended), error (Redis failed, or too few Redlock nodes answered).
# TYPE dlock_acquires_total counter
dlock_acquires_total{lock="",primitive="",result="contended"} 1
dlock_acquires_total{lock="",primitive="",result="error"} 2
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "dlock_acquires_total"); err != nil {
		t.Fatal(err)
	}
}

// Every primitive's acquisitions are counted apart by the "primitive" label.
func TestMetricsTellThePrimitivesApart(t *testing.T) {
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	m := dlockprom.New(dlockprom.Options{})
	c.SetObserver(m.Observe)
	ctx := context.Background()
	take := func(l *dlock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	take(c.TryLock(ctx, "plain"))
	take(c.Semaphore("sem", 2).TryAcquire(ctx))
	take(c.RWMutex("rw").TryRLock(ctx))
	take(c.RWMutex("rw").TryLock(ctx))
	take(c.Election("job").Campaign(ctx, "host-a"))
	want := `
# HELP dlock_releases_total Unlocks by result: ok, token_mismatch (the lock had expired; perhaps someone else held it), error.
# TYPE dlock_releases_total counter
dlock_releases_total{lock="",primitive="election",result="ok"} 1
dlock_releases_total{lock="",primitive="lock",result="ok"} 1
dlock_releases_total{lock="",primitive="rwmutex",result="ok"} 2
dlock_releases_total{lock="",primitive="semaphore",result="ok"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "dlock_releases_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "dlock_acquires_total"); n != 4 {
		t.Fatalf("acquire series: %d, want one per primitive", n)
	}
}

// A hold is visible while it lasts: the holds gauge counts it from the
// grant to its release or loss, and the oldest hold's age grows meanwhile.
func TestHoldsAreVisibleWhileTheyLast(t *testing.T) {
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	m := dlockprom.New(dlockprom.Options{Classify: func(key string) string { return "job" }})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	c.SetObserver(m.Observe)
	ctx := context.Background()
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					if labels := m.GetLabel(); len(labels) == 2 && labels[0].GetValue() == "job" && labels[1].GetValue() == "lock" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	a, err := c.TryLock(ctx, "job:1", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "job:2", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n := gauge("dlock_holds"); n != 2 {
		t.Fatalf("dlock_holds %v while two locks are held, want 2", n)
	}
	deadline := time.Now().Add(30 * time.Second)
	for gauge("dlock_oldest_hold_seconds") <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("the oldest hold's age never grew")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := gauge("dlock_holds"); n != 1 {
		t.Fatalf("dlock_holds %v after one release, want 1", n)
	}
	s.Client(t).Set(ctx, "job:2", "someone-else", time.Minute)
	_ = b.Extend(ctx, time.Minute) // finds the lock gone: lost
	<-b.Context().Done()
	_ = b.Unlock(ctx)
	if n, age := gauge("dlock_holds"), gauge("dlock_oldest_hold_seconds"); n != 0 || age != 0 {
		t.Fatalf("after the release and the loss: dlock_holds %v, oldest %v; want 0 and 0", n, age)
	}
	if problems, err := testutil.CollectAndLint(m); err != nil || len(problems) > 0 {
		t.Fatal(problems, err)
	}
}
