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
	o := options{ttl: 30 * time.Second}
	for i := 0; i < b.N; i++ {
		g, err := n.acquireLine(ctx, nm, "token", "", o)
		if err != nil || !g.ok {
			b.Fatal(g, err)
		}
		if ok, err := n.releaseLine(ctx, nm, "token", "", o.fenceKeep()); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
