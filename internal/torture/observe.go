package torture

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// leaderWatch observes an election scenario's election from the harness
// for the whole run (etcd #18163: after rapid churn, Observe reported a
// leader that was not the current one). Once the clients have stopped, its
// last report must equal Leader.
type leaderWatch struct {
	ucs    []redis.UniversalClient
	locks  *dlock.Client
	key    string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	last    dlock.Leader
	reports int
}

// watchLeader starts observing the election on e's key, through the
// proxies as the clients reach it.
func (e *Env) watchLeader(topology string) *leaderWatch {
	ucs := clients(WorkerConfig{Redis: e.addrs(), Topology: topology, TTL: e.Cfg.TTL})
	clients := make([]dlock.RedisClient, len(ucs))
	for i, c := range ucs {
		clients[i] = c
	}
	w := &leaderWatch{ucs: ucs, locks: dlock.New(clients...), key: e.Key, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	obs := w.locks.Election(e.Key).Observe(ctx)
	go func() {
		defer close(w.done)
		for ld := range obs.C {
			w.mu.Lock()
			w.last, w.reports = ld, w.reports+1
			w.mu.Unlock()
		}
	}()
	return w
}

// agrees reports whether Observe's last report equals Leader (the zero
// Leader when nobody leads), giving the two until wait has passed to
// settle (a lapse is reported within its TTL), and stops the watch.
func (w *leaderWatch) agrees(wait time.Duration) bool {
	defer w.close()
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ld, err := w.locks.Election(w.key).Leader(ctx)
		cancel()
		if errors.Is(err, dlock.ErrNoLeader) {
			ld, err = dlock.Leader{}, nil
		}
		w.mu.Lock()
		same := err == nil && ld == w.last && w.reports > 0
		w.mu.Unlock()
		if same {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *leaderWatch) close() {
	w.cancel()
	<-w.done
	w.locks.Close()
	for _, c := range w.ucs {
		c.Close()
	}
}
