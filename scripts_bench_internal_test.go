package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkScriptsAlone runs dlock's acquire and release scripts directly,
// without the Client around them: the difference to BenchmarkTryLockUnlock
// is the library's own overhead.
func BenchmarkScriptsAlone(b *testing.B) {
	s := redistest.Start(b)
	rdb := s.Client(b)
	n := newNode(rdb, 0)
	ctx := context.Background()
	nm := namesOf("bench")
	for i := 0; i < b.N; i++ {
		g, err := n.acquire(ctx, nm, "token", options{ttl: 30 * time.Second}, false)
		if err != nil || !g.ok {
			b.Fatal(g, err)
		}
		if ok, err := releaseOn(ctx, n, nm, "token", 0, 0, true); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
