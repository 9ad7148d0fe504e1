package dlock_test

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

// shared is a redis-server that tests which do not disturb the server use,
// each with its own keys. Tests that kill, pause or flush a server start
// their own.
var shared *redistest.Server

func TestMain(m *testing.M) {
	var err error
	shared, err = redistest.Spawn()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	addr = shared.Addr() // for the examples
	var masters []*redistest.Server
	for i := 0; i < 3; i++ { // for the Redlock example
		s, err := redistest.Spawn()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		masters = append(masters, s)
		redlockAddrs[i] = s.Addr()
	}
	code := m.Run()
	shared.Close()
	for _, s := range masters {
		s.Close()
	}
	if code == 0 {
		// Every test closes what it opens; anything still running now is
		// a goroutine dlock failed to stop. (go-redis's redial goroutine
		// for a server that was killed notices its pool's Close within a
		// second, hence the patience.)
		err := goleak.Find()
		for try := 0; err != nil && try < 3; try++ {
			time.Sleep(time.Second)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newClient returns a dlock Client on its own go-redis client to s.
func newClient(t testing.TB, s *redistest.Server) (*dlock.Client, *redis.Client) {
	t.Helper()
	rdb := s.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

// key returns a key no other test uses.
func key(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", ":", " ", "_").Replace(t.Name())
	return fmt.Sprintf("lock:%s:%d", name, rand.Uint32())
}

// ctxT returns a context that ends with the test or after a generous
// minute, whichever is first.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every few milliseconds until it holds, and fails the
// test if it does not within a generous deadline.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustLock(t testing.TB, c *dlock.Client, key string, opts ...dlock.Option) *dlock.Lock {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}
