package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

func ExampleClient_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lock, err := locks.TryLock(ctx, "lock:report:2026-11", dlock.WithTTL(10*time.Second))
	if errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("someone else is building the report")
		return
	}
	if err != nil {
		fmt.Println("Redis trouble:", err)
		return
	}
	defer lock.Unlock(ctx)

	fmt.Println("building the report")
	// Output: building the report
}

func ExampleClient_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// Wait up to five seconds for the lock.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := locks.Lock(ctx, "lock:order:1001")
	if err != nil {
		fmt.Println(err) // matches dlock.ErrNotObtained and context.DeadlineExceeded on timeout
		return
	}
	defer lock.Unlock(context.Background())

	fmt.Println("holding", lock.Key())
	// Output: holding lock:order:1001
}

// A fencing token lets the protected resource refuse a holder whose lock has
// expired (it was paused, or a failover lost its lock) and that still tries
// to write after a newer holder did.
func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// The resource remembers the highest fence it has accepted.
	var highest int64
	write := func(fence int64, what string) error {
		if fence <= highest {
			return fmt.Errorf("refused %s: fence is stale", what)
		}
		highest = fence
		return nil
	}

	first, _ := locks.TryLock(ctx, "lock:ledger", dlock.WithTTL(50*time.Millisecond))
	time.Sleep(100 * time.Millisecond) // the first holder stalls; its lock expires
	second, _ := locks.TryLock(ctx, "lock:ledger")
	defer second.Unlock(ctx)

	fmt.Println(write(second.Fence(), "second holder's write"))
	fmt.Println(write(first.Fence(), "first holder's late write"))
	// Output:
	// <nil>
	// refused first holder's late write: fence is stale
}

// Do holds the lock while fn runs, renewing it in the background, and
// unlocks when fn returns. fn's context ends if the lock is lost.
func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	err := locks.Do(context.Background(), "lock:nightly-job", func(ctx context.Context) error {
		// ... the job, which stops when ctx ends ...
		fmt.Println("running the nightly job")
		return nil
	}, dlock.WithTTL(5*time.Second), dlock.WithMaxHold(time.Hour))
	if errors.Is(err, dlock.ErrLost) {
		fmt.Println("the lock was lost while the job ran; its effects may overlap another run's")
	}
	// Output: running the nightly job
}

// A Lock's Context tells the holder when to stop: it ends before the lease
// can run out on the server, and context.Cause says why.
func ExampleLock_Context() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lock, err := locks.TryLock(ctx, "lock:import", dlock.WithTTL(time.Second), dlock.WithAutoRenew())
	if err != nil {
		fmt.Println(err)
		return
	}
	work := time.After(100 * time.Millisecond) // the import, renewed as long as it runs
	select {
	case <-work:
		fmt.Println("import done")
	case <-lock.Context().Done():
		fmt.Println("stopped:", context.Cause(lock.Context()))
	}
	lock.Unlock(ctx)
	fmt.Println("after Unlock:", context.Cause(lock.Context()))
	// Output:
	// import done
	// after Unlock: dlock: released
}

// With several independent masters, every call runs Redlock: the lock is
// held once a majority granted it, and its fence still only grows.
func ExampleNew_redlock() {
	var masters []redis.UniversalClient
	for _, a := range redlockAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		defer rdb.Close()
		masters = append(masters, rdb)
	}
	locks := dlock.New(masters...) // three masters: a majority is two
	defer locks.Close()
	ctx := context.Background()

	// Each master's answer is waited for at most the node timeout (50 ms
	// by default); a first call also opens the connections, so allow more.
	lock, err := locks.TryLock(ctx, "lock:invoice:77", dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(time.Second))
	var qe *dlock.QuorumError
	switch {
	case errors.Is(err, dlock.ErrNotObtained):
		fmt.Println("someone else holds it")
		return
	case errors.As(err, &qe):
		fmt.Printf("only %d of %d masters answered: %v\n", qe.OK, qe.Nodes, err)
		return
	case err != nil:
		fmt.Println(err)
		return
	}
	defer lock.Unlock(ctx)

	// The lease: TTL minus the time the grants took, minus clock drift.
	deadline, _ := lock.Context().Deadline()
	fmt.Println("held with a fence:", lock.Fence() > 0, "- valid for under 10s:", time.Until(deadline) < 10*time.Second)
	// Output: held with a fence: true - valid for under 10s: true
}

// Inspect shows a lock without its token; Attach takes over a lock obtained
// elsewhere (another process, `dlock lock` in a shell script) from its key
// and token, here to release it.
func ExampleClient_Attach() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	lock, err := locks.TryLock(ctx, "lock:backup", dlock.WithTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	token := lock.Token() // handed to the other process, a secret

	st, err := locks.Inspect(ctx, "lock:backup")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held:", st.Held, "- same fence:", st.Fence == lock.Fence(), "- holder shown in full:", st.Holder == token)

	other, err := locks.Attach(ctx, "lock:backup", token)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("released by the other process:", other.Unlock(ctx))
	fmt.Println("the first Lock no longer holds it:", errors.Is(lock.Unlock(ctx), dlock.ErrNotHeld))
	// Output:
	// held: true - same fence: true - holder shown in full: false
	// released by the other process: <nil>
	// the first Lock no longer holds it: true
}

// A scheduled job that must run once however many instances are up: each
// instance campaigns, the leader runs the job under its leadership's
// context, and a standby takes over when it resigns or dies.
func ExampleElection_Campaign() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	election := locks.Election("election:nightly-jobs")
	leadership, err := election.Campaign(ctx, "worker-1") // waits until elected
	if err != nil {
		fmt.Println(err)
		return
	}
	defer leadership.Unlock(ctx) // resign

	leader, _ := election.Leader(ctx)
	fmt.Println("leader:", leader.Value, "term > 0:", leader.Term == leadership.Fence() && leader.Term > 0)
	// Run the jobs under leadership.Context(): it ends if leadership is lost.
	// Output: leader: worker-1 term > 0: true
}

// Observe tells a standby who leads, and every change, by notification.
func ExampleElection_Observe() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	election := locks.Election("election:primary")
	changes := election.Observe(ctx).C
	fmt.Printf("leader: %q\n", (<-changes).Value) // nobody yet

	leadership, err := election.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("leader: %q\n", (<-changes).Value)
	leadership.Unlock(ctx)
	fmt.Printf("leader: %q\n", (<-changes).Value)
	// Output:
	// leader: ""
	// leader: "10.0.0.7:8080"
	// leader: ""
}

// Locking every item of an order: all the items' keys, in any order,
// without deadlocking against another order naming the same items in
// another order. Writes under them carry each lock's fence (docs/stock.md
// deducts stock this way; guard's Example_stock runs it).
func ExampleClient_LockAll() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	held, err := locks.LockAll(ctx, []string{"stock:sku-42", "stock:sku-7", "stock:sku-19"})
	if err != nil {
		fmt.Println(err) // none is held
		return
	}
	defer locks.UnlockAll(context.Background(), held)

	for _, l := range held {
		fmt.Println("holding", l.Key())
	}
	// Output:
	// holding stock:sku-42
	// holding stock:sku-7
	// holding stock:sku-19
}

// At most three callers of a partner API at once, across every process.
func ExampleSemaphore_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	sem := locks.Semaphore("sem:partner-api", 3)
	permit, err := sem.Acquire(ctx, dlock.WithTTL(10*time.Second)) // waits in line for a permit
	if err != nil {
		fmt.Println(err)
		return
	}
	defer permit.Unlock(context.Background())

	st, _ := locks.Inspect(ctx, "sem:partner-api")
	fmt.Println("permits taken:", st.Holders)
	// Output: permits taken: 1
}

// Many readers of a cache, one rebuilder at a time; a waiting rebuilder is
// not starved by readers.
func ExampleRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: addr()})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	m := locks.RWMutex("rw:price-cache")
	r1, _ := m.RLock(ctx)
	r2, _ := m.RLock(ctx) // readers share
	if _, err := m.TryLock(ctx); errors.Is(err, dlock.ErrNotObtained) {
		fmt.Println("the writer waits for the readers")
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	w, err := m.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Unlock(ctx)
	fmt.Println("rebuilding, fence above every reader's:", w.Fence() > r2.Fence())
	// Output:
	// the writer waits for the readers
	// rebuilding, fence above every reader's: true
}
