package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A watch made while a cancelled watch's subscription is still being
// confirmed is ready only once its own subscription is in place: a message
// published after ready reaches it (found by review: the first watch's
// late "subscribe" reply made the second ready, and the server then ran
// the first's UNSUBSCRIBE).
func TestAWatchMadeAsAnotherIsCancelledIsReadyOnlyWhenSubscribed(t *testing.T) {
	s := redistest.Start(t)
	pub := s.Client(t)
	n := NewNode(s.Client(t), 0, time.Second)
	defer n.StopWatching()
	missed := 0
	const rounds = 1000
	for i := range rounds {
		ch := fmt.Sprint("rewatch:", i)
		a, _ := n.Watch(ch)
		a.Cancel()
		b, ready := n.Watch(ch)
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: never ready", i)
		}
		if err := pub.Publish(context.Background(), ch, "hello").Err(); err != nil {
			t.Fatal(err)
		}
		if !receives(b, "hello", 2*time.Second) {
			missed++
		}
		b.Cancel()
	}
	if missed > 0 {
		t.Fatalf("%d of %d watches missed a message published after they were ready", missed, rounds)
	}
}

// receives reports whether payload comes on w.C within d.
func receives(w *Watch, payload string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case p, ok := <-w.C:
			if !ok {
				return false
			}
			if p == payload {
				return true
			}
		case <-deadline:
			return false
		}
	}
}
