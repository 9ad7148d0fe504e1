package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkScriptsAlone runs dlock's acquire and release scripts directly,
// without the Client around them: the difference to BenchmarkTryLockUnlock
// is the library's own overhead. It reports the scripts' own time on the
// server per cycle (INFO commandstats).
func BenchmarkScriptsAlone(b *testing.B) {
	s := redistest.Start(b)
	rdb := s.Client(b)
	n := newNode(rdb, 0)
	ctx := context.Background()
	nm := namesOf("bench")
	o := options{ttl: 30 * time.Second}
	usec := func() float64 { // the scripts' own time on the server (commandstats)
		stat := redistest.Info(rdb, "commandstats")["cmdstat_evalsha"]
		for _, f := range strings.Split(stat, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	for range 10 { // the scripts loaded
		_, _ = n.acquireLine(ctx, nm, "token", "", o)
		_, _ = n.releaseLine(ctx, nm, "token", "", o.fenceKeep())
	}
	before := usec()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := n.acquireLine(ctx, nm, "token", "", o)
		if err != nil || !g.ok {
			b.Fatal(g, err)
		}
		if ok, err := n.releaseLine(ctx, nm, "token", "", o.fenceKeep()); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric((usec()-before)/float64(b.N), "script-µs/op")
}
