package guard_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// shared is the Redis server the tests and examples use (addr).
var (
	shared *redistest.Server
	addr   string
)

func TestMain(m *testing.M) {
	var err error
	if shared, err = redistest.Spawn(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = shared.Addr()
	code := m.Run()
	shared.Close()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a dlock Client on s and its go-redis client, closed
// with the test.
func newClient(t testing.TB, s *redistest.Server) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := s.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

// key returns a key no other test uses.
func key(t testing.TB) string {
	name := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	return fmt.Sprintf("res:%s:%d", name, rand.Uint32())
}

// ctxT returns a context that ends with the test or after a minute.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mustLock takes key on c at once, or fails the test.
func mustLock(t testing.TB, c *dlock.Client, key string, opts ...dlock.Option) *dlock.Lock {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}

// eventually polls cond until it holds, for at most 20 seconds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 20s", what)
		}
	}
}
