package gate

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// TestMain checks that the gates leave no goroutine behind: every gate's
// subscriptions end with its last waiter (and the nodes' with StopWatching).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// nodes starts n redis-servers and returns their transport nodes, with a
// client of each to publish from.
func nodes(t *testing.T, n int) ([]Watcher, []*redis.Client) {
	var ws []Watcher
	var rdbs []*redis.Client
	for i := range n {
		rdb := redistest.Start(t).Client(t)
		node := transport.NewNode(rdb, i, time.Second)
		t.Cleanup(node.StopWatching)
		ws = append(ws, node)
		rdbs = append(rdbs, rdb)
	}
	return ws, rdbs
}

// waitQueued waits until n callers wait in line at key's gate.
func waitQueued(t *testing.T, gs *Gates, key string, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		gs.mu.Lock()
		g := gs.m[key]
		queued := g != nil && len(g.queue) == n
		gs.mu.Unlock()
		if queued {
			return
		}
	}
	t.Fatalf("%d callers never queued at %q", n, key)
}

func TestTurnsAreTakenInArrivalOrderAndAMajorityOfReleasesWakes(t *testing.T) {
	ws, rdbs := nodes(t, 3)
	gs := New(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, ok := gs.Enter(ctx, nil, "k")
	if !ok {
		t.Fatal("the first caller did not get the turn")
	}
	if !first.Subscribed(ctx, 10*time.Second) {
		t.Fatal("the gate's subscriptions were not confirmed")
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			turn, ok := gs.Enter(ctx, nil, "k")
			if !ok {
				order <- -1
				return
			}
			order <- i
			turn.Leave(time.Time{})
		}()
		waitQueued(t, gs, "k", i+1) // arrive in order
	}

	first.Attempting()
	rdbs[0].Publish(ctx, keyspace.Wake("k"), "released")
	if first.Await(ctx, nil, 300*time.Millisecond) {
		t.Fatal("one node's release of three woke the turn")
	}
	rdbs[1].Publish(ctx, keyspace.Wake("k"), "released")
	if !first.Await(ctx, nil, 20*time.Second) {
		t.Fatal("a majority's releases did not wake the turn")
	}
	first.Leave(time.Time{})
	if a, b := <-order, <-order; a != 0 || b != 1 {
		t.Fatalf("turns taken in the order %d, %d; want 0, 1", a, b)
	}
}

func TestATurnPassedOnByAHolderWaitsForItsRelease(t *testing.T) {
	ws, _ := nodes(t, 1)
	gs := New(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, _ := gs.Enter(ctx, nil, "k")
	next := make(chan *Turn)
	go func() {
		turn, _ := gs.Enter(ctx, nil, "k")
		next <- turn
	}()
	waitQueued(t, gs, "k", 1)
	holder.Leave(time.Now().Add(time.Minute)) // it obtained the lock, held for a minute
	turn := <-next
	done := make(chan struct{})
	go func() {
		turn.AwaitHolder(ctx, nil)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the turn did not wait for its holder's release")
	case <-time.After(200 * time.Millisecond):
	}
	gs.Freed("k")
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Freed did not end the wait for the holder")
	}
	turn.Leave(time.Time{})
}

func TestAWaiterThatGivesUpLeavesTheLine(t *testing.T) {
	ws, _ := nodes(t, 1)
	gs := New(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	turn, _ := gs.Enter(ctx, nil, "k")
	short, stop := context.WithCancel(ctx)
	stop()
	if _, ok := gs.Enter(short, nil, "k"); ok {
		t.Fatal("a waiter whose context ended got the turn")
	}
	closed := make(chan struct{})
	close(closed)
	if _, ok := gs.Enter(ctx, closed, "k"); ok {
		t.Fatal("a waiter whose Client closed got the turn")
	}
	turn.Leave(time.Time{}) // nobody left in line: the gate goes, with its subscriptions
	again, ok := gs.Enter(ctx, nil, "k")
	if !ok {
		t.Fatal("the gate was not free after the line emptied")
	}
	again.Leave(time.Time{})
}
