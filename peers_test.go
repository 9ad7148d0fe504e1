package dlock_test

// Every peer's known failure, replayed on real servers (docs/failures.md
// has the table). Each test is named for the peer and its issue.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/torture"
)

// roleEnv names the role a copy of the test binary plays (playRole)
// instead of running the tests.
const roleEnv = "DLOCK_TEST_ROLE"

// playRole is a process of its own for the tests that kill or stop one:
// "wait" waits for the lock at $DLOCK_TEST_KEY; "lead" campaigns for it
// with a 2 s auto-renewed lease and, once its Context ends, prints the last
// moment it still believed it led.
func playRole(role string) int {
	c := dlock.New(redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")}))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := os.Getenv("DLOCK_TEST_KEY")
	switch role {
	case "wait":
		if _, err := c.Lock(ctx, k); err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		fmt.Println("granted")
		<-ctx.Done()
	case "lead":
		l, err := c.Election(k).Campaign(ctx, "paused", dlock.WithTTL(2*time.Second), dlock.WithAutoRenew())
		if err != nil {
			fmt.Println("failed:", err)
			return 1
		}
		fmt.Println("leading", l.Fence())
		var last time.Time
		for l.Context().Err() == nil {
			last = time.Now() // taken after a look that found it leading: never too early
			time.Sleep(time.Millisecond)
		}
		lastNs := int64(0) // stopped before its first look
		if !last.IsZero() {
			lastNs = last.UnixNano()
		}
		fmt.Println("ended", lastNs, context.Cause(l.Context()))
	}
	return 0
}

// role starts a copy of the test binary playing role on key k, and returns
// it with its output's lines.
func role(t *testing.T, name, k string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+name, "DLOCK_TEST_ADDR="+addr(), "DLOCK_TEST_KEY="+k)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}

// Redisson #2278, #3730, #4661: a fair lock's queue wedged after a waiter
// crashed, until the dead waiter's timeout. Here a waiter's process is
// SIGKILLed while queued, just before the holder unlocks (its group still
// looks alive, so it is granted a claim it never takes up), and again well
// before (its group is dead when reached, and skipped). The next waiter is
// served once the claim (1 s) lapses, or at once.
func TestPeerRedissonFairLockAfterAWaiterCrashed(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	for _, pause := range []time.Duration{0, 3 * time.Second} {
		t.Run(fmt.Sprintf("killed %v before the unlock", pause), func(t *testing.T) {
			c, _ := newClient(t, shared())
			k := key(t)
			holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
			crashed, _ := role(t, "wait", k)
			eventually(t, "the doomed waiter queues", func() bool { return waiters(t, c, k) == 1 })
			next, _ := newClient(t, shared())
			served := make(chan error, 1)
			go func() {
				l, err := next.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
				if err == nil {
					err = l.Unlock(ctxT(t))
				}
				served <- err
			}()
			eventually(t, "the next waiter queues", func() bool { return waiters(t, c, k) == 2 })
			crashed.Process.Signal(syscall.SIGKILL)
			crashed.Wait()
			time.Sleep(pause)
			if err := holder.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			unlocked := time.Now()
			select {
			case err := <-served:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("the next waiter was served %v after the unlock", time.Since(unlocked).Round(time.Millisecond))
			case <-time.After(20 * time.Second): // a third of the minute-long TTLs
				t.Fatal("the queue is wedged behind the crashed waiter")
			}
		})
	}
}

// waiters returns how many wait for k.
func waiters(t *testing.T, c *dlock.Client, k string) int {
	st, err := c.Inspect(ctxT(t), k)
	if err != nil {
		t.Fatal(err)
	}
	return st.Waiters
}

// Redisson #5761: a lost unlock message left a waiter waiting until the
// lock's lease expired. Here every pub/sub connection is killed (CLIENT
// KILL TYPE pubsub) over and over while 60 goroutines on three Clients
// take 300 turns on one key with minute-long TTLs: every hand-off still
// reaches its waiter, long before any lease could lapse.
func TestPeerRedissonMissedUnlockMessage(t *testing.T) {
	admin := shared().Client(t)
	k := key(t)
	stop, killed := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				killed <- n
				return
			case <-time.After(20 * time.Millisecond):
				k, _ := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result()
				n += int(k)
			}
		}
	}()
	var wg sync.WaitGroup
	var worst time.Duration
	var mu sync.Mutex
	for i := 0; i < 3; i++ {
		c, _ := newClient(t, shared())
		for g := 0; g < 20; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 5; r++ {
					began := time.Now()
					l, err := c.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					worst = max(worst, time.Since(began))
					mu.Unlock()
					time.Sleep(time.Millisecond)
					if err := l.Unlock(ctxT(t)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	t.Logf("300 turns, %d pub/sub connections killed on the way; the longest wait %v", <-killed, worst.Round(time.Millisecond))
}

// Redisson #7272: a renewal still running after unlock extended, or
// re-created, the released key. Here Unlock comes at a random moment of an
// auto-renewed 10 ms lock (the shortest TTL, renewed every 3 ms), so that
// renewals are often in flight: after each Unlock the key is gone, and
// stays gone, and another Client takes it at once.
func TestPeerRedissonRenewalAfterUnlock(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	c, rdb := newClient(t, shared())
	other, _ := newClient(t, shared())
	ctx := ctxT(t)
	for i := 0; i < 200; i++ {
		k := key(t)
		l, err := c.TryLock(ctx, k, dlock.WithTTL(dlock.MinTTL), dlock.WithAutoRenew())
		if errors.Is(err, dlock.ErrLeaseExpired) {
			continue // a 10 ms lease ran out before its grant was confirmed: a loaded machine, not this test's case
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.IntN(int(dlock.MinTTL))))
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("round %d: the key exists after Unlock", i)
		}
		time.Sleep(2 * dlock.MinTTL) // any renewal still on its way has arrived
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("round %d: a renewal re-created the key after Unlock", i)
		}
		o := mustLock(t, other, k, dlock.WithTTL(time.Minute))
		if err := o.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Curator #1137, #1211: a leader paused (a GC pause, SIGSTOP) past its
// session kept acting as leader once it resumed, beside the next one.
// Here the leader's process is SIGSTOPped; another campaigner is elected
// once the lease has lapsed; the old leader resumes. The last moment it
// believed it led is before the next leader's Campaign returned.
func TestPeerCuratorDoubleLeaderAfterAPause(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	leader, lines := role(t, "lead", k)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "leading ") {
		t.Fatalf("the first leader says %q", lines.Text())
	}
	first, _ := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "leading "), 10, 64)
	leader.Process.Signal(syscall.SIGSTOP)
	next, err := c.Election(k).Campaign(ctxT(t), "next", dlock.WithTTL(time.Minute))
	elected := time.Now()
	leader.Process.Signal(syscall.SIGCONT)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctxT(t))
	if next.Fence() <= first {
		t.Fatalf("the next term %d is not above the paused leader's %d", next.Fence(), first)
	}
	if !lines.Scan() {
		t.Fatal("the paused leader said nothing after it resumed")
	}
	var lastNs int64
	var cause string
	if _, err := fmt.Sscanf(lines.Text(), "ended %d %s", &lastNs, &cause); err != nil {
		t.Fatalf("the paused leader says %q", lines.Text())
	}
	said := strings.TrimPrefix(lines.Text(), "ended "+strconv.FormatInt(lastNs, 10)+" ")
	if lastNs == 0 {
		t.Logf("the leader was stopped before its first look, and found it had lost: %s", said)
		return
	}
	last := time.Unix(0, lastNs)
	if !last.Before(elected) {
		t.Fatalf("the paused leader believed it led until %v, after the next leader was elected", last.Sub(elected))
	}
	t.Logf("the paused leader's belief ended %v before the next leader's Campaign returned: %s", elected.Sub(last).Round(time.Millisecond), said)
}

// etcd #18163: after rapid leadership churn, Observe's last report was not
// the current leader. Here three Clients campaign and resign 90 times
// between them while a fourth observes; once one stays leader, the last
// leader Observe reported is Leader()'s, and stays so.
func TestPeerEtcdObserveAfterChurn(t *testing.T) {
	obsC, _ := newClient(t, shared())
	k := key(t)
	ctx := ctxT(t)
	seen := observed(ctx, obsC.Election(k))
	var wg sync.WaitGroup
	var clients []*dlock.Client
	for i := 0; i < 3; i++ {
		c, _ := newClient(t, shared())
		clients = append(clients, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 30; r++ {
				l, err := c.Election(k).Campaign(ctx, fmt.Sprintf("c%d-%d", i, r), dlock.WithTTL(5*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				l.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	final, err := clients[0].Election(k).Campaign(ctx, "final", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer final.Unlock(ctx)
	leads := func() bool {
		ld, err := obsC.Election(k).Leader(ctx)
		return err == nil && seen() == ld && ld.Value == "final"
	}
	eventually(t, "Observe reports Leader()", leads)
	time.Sleep(500 * time.Millisecond) // no stale report arrives after it
	if !leads() {
		t.Fatalf("Observe's last report %+v is no longer the leader", seen())
	}
}

// etcd #19597: a waiter whose session expired while it was cut off later
// believed it held the lock it had been skipped for. Here a waiter's only
// way to Redis is black-holed for 3 s (past its group's 1 s liveness) as
// the holder unlocks: the lock goes to the next waiter. When the waiter's
// network is back it waits again, and obtains the lock only after the
// next waiter has let it go, with a higher fence.
func TestPeerEtcdWaiterCutOffPastItsLiveness(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	p, err := torture.NewProxy(addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cut := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer cut.Close()
	cutC := dlock.New(cut)
	defer cutC.Close()
	c, _ := newClient(t, shared())
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	type got struct {
		l  *dlock.Lock
		at time.Time
	}
	cutGot := make(chan got, 1)
	go func() {
		l, err := cutC.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		cutGot <- got{l, time.Now()}
	}()
	eventually(t, "the waiter to be cut off queues", func() bool { return waiters(t, c, k) == 1 })
	other, _ := newClient(t, shared())
	nextGot := make(chan *dlock.Lock, 1)
	go func() {
		l, err := other.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		nextGot <- l
	}()
	eventually(t, "the next waiter queues", func() bool { return waiters(t, c, k) == 2 })
	p.SetDrop(true)
	time.Sleep(1500 * time.Millisecond) // past the cut-off waiter's liveness
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	next := <-nextGot
	time.Sleep(1500 * time.Millisecond)
	p.SetDrop(false)
	p.Cut()
	time.Sleep(2 * time.Second) // the cut-off waiter is back and waits again
	select {
	case g := <-cutGot:
		t.Fatalf("the cut-off waiter obtained the lock (%v) while the next waiter holds it", g.l)
	default:
	}
	// The release hands the lock over: the waiter may return before
	// Unlock does, but not before Unlock began.
	releasing := time.Now()
	if err := next.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	g := <-cutGot
	if g.l == nil {
		t.Fatal("the cut-off waiter was not served after the next waiter let go")
	}
	defer g.l.Unlock(ctxT(t))
	if g.at.Before(releasing) || g.l.Fence() <= next.Fence() {
		t.Fatalf("the cut-off waiter's lock: fence %d after the next waiter's %d, obtained %v after its release began", g.l.Fence(), next.Fence(), g.at.Sub(releasing))
	}
}

// redsync PR #149: a Redlock node restarted without persistence during a
// hold erodes the quorum, and a second client can take the lock beside the
// first. Here two of three nodes restart empty while A holds the lock: B
// obtains it (Redlock's known limit without persistence), with a higher
// fence, and the fence guard refuses A's next write after B's.
func TestPeerRedsyncQuorumErosion(t *testing.T) {
	nodes := startNodes(t, 3)
	var rdbs []*redis.Client
	for _, s := range nodes {
		rdbs = append(rdbs, s.Client(t))
	}
	ca, cb := dlock.New(rdbs...), dlock.New(rdbs...)
	defer ca.Close()
	defer cb.Close()
	ctx := ctxT(t)
	k := key(t)
	g := guard.NewRedis(shared().Client(t))
	resource := k + ":resource"
	a := mustLock(t, ca, k, dlock.WithTTL(time.Minute))
	if err := g.For(a).Set(ctx, resource, "a", 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes[:2] {
		s.Kill()
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	var b *dlock.Lock
	eventually(t, "B takes the lock on the emptied majority", func() bool {
		var err error
		b, err = cb.TryLock(ctx, k, dlock.WithTTL(time.Minute))
		return err == nil
	})
	defer b.Unlock(ctx)
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d is not above A's %d", b.Fence(), a.Fence())
	}
	if err := g.For(b).Set(ctx, resource, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.For(a).Set(ctx, resource, "a again", 0); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("A's write after B's: %v, want ErrStaleFence", err)
	}
	if v := shared().Client(t).Get(ctx, resource).Val(); v != "b" {
		t.Fatalf("the resource holds %q, want B's write", v)
	}
}
