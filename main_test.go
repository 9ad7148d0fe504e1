package dlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The servers the tests share start on first use, so that the tests
// that need no server (parsing, keys, options) run without one.
var (
	sharedServer  = lazily(func() ([]*redistest.Server, error) { s, err := redistest.Spawn(); return []*redistest.Server{s}, err })
	redlockServer = lazily(func() ([]*redistest.Server, error) {
		var masters []*redistest.Server
		for i := 0; i < 3; i++ {
			s, err := redistest.Spawn()
			if err != nil {
				return masters, err
			}
			masters = append(masters, s)
		}
		return masters, nil
	})
)

// shared is a redis-server that tests which do not disturb the server use,
// each with its own keys. Tests that kill, pause or flush a server start
// their own.
func shared() *redistest.Server { return sharedServer.get()[0] }

// addr is the address of the server the examples use.
func addr() string { return shared().Addr() }

// redlockAddrs are the three independent masters of the Redlock example.
func redlockAddrs() []string {
	var addrs []string
	for _, s := range redlockServer.get() {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// servers are servers started once, on first use, and closed by TestMain.
type servers struct {
	once  sync.Once
	start func() ([]*redistest.Server, error)
	got   []*redistest.Server
}

var started []*servers

func lazily(start func() ([]*redistest.Server, error)) *servers {
	s := &servers{start: start}
	started = append(started, s)
	return s
}

func (s *servers) get() []*redistest.Server {
	s.once.Do(func() {
		var err error
		if s.got, err = s.start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	})
	return s.got
}

func TestMain(m *testing.M) {
	if r := os.Getenv(roleEnv); r != "" {
		os.Exit(playRole(r))
	}
	code := m.Run()
	for _, s := range started {
		for _, srv := range s.got {
			if srv != nil {
				srv.Close()
			}
		}
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

// lockLater starts c.Lock(ctxT(t), key, opts...) in a goroutine and
// returns a channel that gets the lock when Lock returns (nil after an
// error, which fails the test).
func lockLater(t *testing.T, c *dlock.Client, key string, opts ...dlock.Option) <-chan *dlock.Lock {
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctxT(t), key, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

func mustLock(t testing.TB, c *dlock.Client, key string, opts ...dlock.Option) *dlock.Lock {
	t.Helper()
	l, err := c.TryLock(ctxT(t), key, opts...)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", key, err)
	}
	return l
}
