package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The same acquire request run twice (go-redis retries a command whose
// connection broke) answers the grant both times, with one fence: nothing
// is left held that its caller does not know of.
func TestAnAcquireRunTwiceIsGrantedOnce(t *testing.T) {
	s := redistest.Start(t)
	n := newNode(s.Client(t), 0)
	ctx := context.Background()
	for _, token := range []string{"tok", "~s2~tok", "~w~tok"} {
		nm := namesOf("lock:twice:" + token)
		o := options{ttl: time.Minute, fenceMargin: time.Minute}
		first, err := n.acquire(ctx, nm, token, o, false)
		if err != nil || !first.ok {
			t.Fatal(token, first, err)
		}
		again, err := n.acquire(ctx, nm, token, o, false)
		if err != nil || !again.ok || again.fence != first.fence {
			t.Fatalf("%s: the second run: %+v %v, want the grant with fence %d", token, again, err, first.fence)
		}
	}
}
