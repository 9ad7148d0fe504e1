package torture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// WorkerConfig is what a client process is told to do.
type WorkerConfig struct {
	ID         int           // the client's ID in the history
	Redis      []string      // node addresses (the proxies)
	Resource   string        // the fenced resource's address
	Key        string        // the lock key
	TTL        time.Duration // the lock's TTL
	Hold       time.Duration // how long each hold lasts
	Duration   time.Duration // how long to keep going
	ReplicaAck int           // replicas that must acknowledge a grant (0: none)
	// Waiters, when positive, makes the process a herd: that many
	// goroutines on one Client, each waiting for the lock until it is
	// served once (or Duration has passed). Each reports as client
	// ID*Waiters+i.
	Waiters int
	// Primitive is what the client takes (Scenario.Primitive), Permits a
	// semaphore's permits. A semaphore's holders do not write to the
	// fenced resource: several hold at once by design. "renewed" is a Lock
	// auto-renewed at renewedTTL, which the holder looks for on every node
	// after each Unlock.
	Primitive string
	Permits   int
	// Topology is how Redis is reached: "" through Redis (one address a
	// node), "sentinel" through the Sentinels at Redis, "cluster" through
	// a cluster with the seed addresses Redis.
	Topology string
	// Setup, if set, is called with the process's Client before it is
	// used (the command sets its tracer there). It returns the context
	// every call of the run is made under (carrying the scenario's trace)
	// and what to run before the process ends (flushing spans).
	Setup func(*dlock.Client) (context.Context, func())
}

// RunWorker loops until cfg.Duration has passed: obtain the lock, write to
// the fenced resource under it a few times while holding it, release it.
// It reports every step to out. It writes without checking the lock between
// a pause and the write that follows it, as real code does, so that a paused
// holder's stale writes reach the resource: the fence must stop them.
func RunWorker(cfg WorkerConfig, out io.Writer) error {
	rec := newRecorder(out)
	ucs := clients(cfg)
	for _, c := range ucs {
		defer c.Close()
	}
	locks := dlock.New(ucs...)
	defer locks.Close()
	base := context.Background()
	if cfg.Setup != nil {
		ctx, done := cfg.Setup(locks)
		defer done()
		base = ctx
	}
	res := newWriter(cfg.Resource)
	defer res.close()
	write := func(id int, fence, grant int64) {
		refused, err := res.write(id, fence, grant)
		switch {
		case refused:
			rec.emit(Event{Kind: "refused", Client: id, Fence: fence})
		case err != nil:
			rec.emit(Event{Kind: "error", Client: id, Detail: "resource"})
		}
	}
	opts := []dlock.Option{dlock.WithTTL(cfg.TTL)}
	if len(cfg.Redis) > 1 {
		opts = append(opts, dlock.WithNodeTimeout(cfg.TTL/10))
	}
	if cfg.ReplicaAck > 0 {
		opts = append(opts, dlock.WithReplicaAck(cfg.ReplicaAck, cfg.TTL/10))
	}

	if cfg.Waiters > 0 {
		runHerd(base, cfg, locks, opts, write, rec)
		return nil
	}
	obtain := func(ctx context.Context) (*dlock.Lock, error) {
		switch cfg.Primitive {
		case "election":
			return locks.Election(cfg.Key).Campaign(ctx, fmt.Sprint("client-", cfg.ID), opts...)
		case "semaphore":
			return locks.Semaphore(cfg.Key, cfg.Permits).Acquire(ctx, opts...)
		case "rwmutex":
			if reader(cfg.ID) {
				return locks.RWMutex(cfg.Key).RLock(ctx, opts...)
			}
			return locks.RWMutex(cfg.Key).Lock(ctx, opts...)
		case "renewed":
			o := append(opts[:len(opts):len(opts)], dlock.WithTTL(renewedTTL), dlock.WithAutoRenew())
			if len(cfg.Redis) > 1 {
				o = append(o, dlock.WithNodeTimeout(renewedTTL/3))
			}
			return locks.Lock(ctx, cfg.Key, o...)
		}
		return locks.Lock(ctx, cfg.Key, opts...)
	}
	if cfg.Primitive == "semaphore" || (cfg.Primitive == "rwmutex" && reader(cfg.ID)) {
		write = func(int, int64, int64) {} // several hold at once by design
	}
	end := time.Now().Add(cfg.Duration)
	for time.Now().Before(end) {
		rec.emit(Event{Kind: "attempt", Client: cfg.ID})
		ctx, cancel := context.WithTimeout(base, 2*cfg.TTL)
		sent := time.Now().UnixNano()
		l, err := obtain(ctx)
		cancel()
		if err != nil {
			rec.emit(Event{Kind: "error", Client: cfg.ID, Detail: errorKind(err)})
			time.Sleep(cfg.TTL / 20)
			continue
		}
		released := hold(base, cfg, rec, cfg.ID, l, sent, func(granted int64) {
			for i := 0; i < 3 && l.Context().Err() == nil; i++ {
				time.Sleep(cfg.Hold / 3)          // a pause here outlives the lease...
				write(cfg.ID, l.Fence(), granted) // ...and this write goes out regardless
			}
		})
		if released && cfg.Primitive == "renewed" && resurrected(base, ucs, cfg.Key, l.Token()) {
			rec.emit(Event{Kind: "resurrected", Client: cfg.ID, Fence: l.Fence()})
		}
	}
	return nil
}

// clients returns the go-redis clients of cfg's nodes: one per address,
// or one failover client or cluster client over them all. Timeouts are
// the TTL's, so that a dead node is noticed within a lease; a herd runs on
// go-redis's defaults, as users do.
func clients(cfg WorkerConfig) []redis.UniversalClient {
	short := cfg.Waiters == 0
	switch cfg.Topology {
	case "sentinel":
		o := &redis.FailoverOptions{MasterName: redistest.SentinelMasterName, SentinelAddrs: cfg.Redis, DisableIdentity: true}
		if short {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, cfg.TTL, cfg.TTL
		}
		return []redis.UniversalClient{redis.NewFailoverClient(o)}
	case "cluster":
		o := &redis.ClusterOptions{Addrs: cfg.Redis, DisableIdentity: true}
		if short {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 200*time.Millisecond, cfg.TTL, cfg.TTL
		}
		return []redis.UniversalClient{redis.NewClusterClient(o)}
	}
	var ucs []redis.UniversalClient
	for _, a := range cfg.Redis {
		opts := &redis.Options{Addr: a, DialTimeout: 200 * time.Millisecond,
			ReadTimeout: cfg.TTL, WriteTimeout: cfg.TTL, MaxRetries: -1, DisableIdentity: true}
		if !short {
			opts = &redis.Options{Addr: a, DisableIdentity: true}
		}
		ucs = append(ucs, redis.NewClient(opts))
	}
	return ucs
}

// reader reports whether client id of an rwmutex scenario reads (odd
// ids) or writes (even ids).
func reader(id int) bool { return id%2 == 1 }

// hold reports client id's grant of l (its acquire sent at sent), and any
// loss, runs work under the lock, releases it and reports the release.
func hold(base context.Context, cfg WorkerConfig, rec *recorder, id int, l *dlock.Lock, sent int64, work func(granted int64)) (released bool) {
	now := time.Now()
	granted := now.UnixNano()
	dl, _ := l.Context().Deadline()
	expiry := now.Add(time.Until(dl) + cfg.TTL/100 + 2*time.Millisecond).UnixNano()
	rec.emit(Event{Kind: "grant", Client: id, Fence: l.Fence(), Sent: sent, Expiry: expiry, At: granted})
	stop := context.AfterFunc(l.Context(), func() {
		if cause := context.Cause(l.Context()); errors.Is(cause, dlock.ErrLost) {
			rec.emit(Event{Kind: "lost", Client: id, Fence: l.Fence(), Detail: cause.Error()})
		}
	})
	work(granted)
	// The holding interval ends when the holder starts to let go: it does
	// nothing under the lock after this.
	releasing := time.Now().UnixNano()
	uctx, ucancel := context.WithTimeout(base, cfg.TTL)
	err := l.Unlock(uctx)
	ucancel()
	stop()
	detail := "ok"
	if err != nil {
		detail = errorKind(err)
	}
	rec.emit(Event{Kind: "release", Client: id, Fence: l.Fence(), Detail: detail, At: releasing})
	return err == nil
}

// renewedTTL is the "renewed" primitive's TTL: renewed every 10 ms, so
// that an Unlock often meets a renewal in flight (redisson #7272).
const renewedTTL = 3 * dlock.MinTTL

// resurrected reports whether, a few renewal periods after an Unlock that
// released the lock, any node's key still (or again) holds the released
// token: a renewal that ran after the release would have kept or made it.
func resurrected(ctx context.Context, ucs []redis.UniversalClient, key, token string) bool {
	time.Sleep(2 * renewedTTL)
	for _, c := range ucs {
		if v, err := c.Get(ctx, key).Result(); err == nil && strings.HasPrefix(v, token) {
			return true
		}
	}
	return false
}

// errorKind names an error for the tallies.
func errorKind(err error) string {
	switch {
	case errors.Is(err, dlock.ErrNoReplicaAck):
		return "replica_ack"
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, dlock.ErrNoQuorum):
		return "no_quorum"
	case errors.Is(err, dlock.ErrLeaseExpired):
		return "lease_expired"
	case errors.Is(err, dlock.ErrNotObtained):
		return "not_obtained"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var ne *dlock.NodeError
	if errors.As(err, &ne) {
		return "node"
	}
	return "other"
}

// runHerd is a herd process: cfg.Waiters goroutines on one Client, each
// waiting for the lock on the one key until it is served once. A waiter
// whose attempt fails (a fault) tries again; one still unserved when
// cfg.Duration has passed reports "unserved". Under the lock each writes
// to the fenced resource after its hold, as a holder that paused would.
func runHerd(base context.Context, cfg WorkerConfig, locks *dlock.Client, opts []dlock.Option, write func(id int, fence, grant int64), rec *recorder) {
	end := time.Now().Add(cfg.Duration)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := cfg.ID*cfg.Waiters + i
			for time.Now().Before(end) {
				rec.emit(Event{Kind: "attempt", Client: id})
				ctx, cancel := context.WithDeadline(base, end)
				sent := time.Now().UnixNano()
				l, err := locks.Lock(ctx, cfg.Key, opts...)
				cancel()
				if err != nil {
					rec.emit(Event{Kind: "error", Client: id, Detail: errorKind(err)})
					time.Sleep(cfg.TTL / 20)
					continue
				}
				hold(base, cfg, rec, id, l, sent, func(granted int64) {
					time.Sleep(cfg.Hold)
					write(id, l.Fence(), granted)
				})
				rec.emit(Event{Kind: "served", Client: id})
				return
			}
			rec.emit(Event{Kind: "unserved", Client: id})
		}()
	}
	wg.Wait()
}
