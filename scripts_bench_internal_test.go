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
	n := newNode(rdb)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		g, err := n.acquire(ctx, "bench", "token", options{ttl: 30 * time.Second})
		if err != nil || !g.ok {
			b.Fatal(g, err)
		}
		if ok, err := n.release(ctx, "bench", "token", 0, 30*time.Second); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
