// Package console serves a live view of a deployment's locks in a browser:
// every lock, semaphore, read-write lock and election whose key matches a
// pattern, with its holders and their owner records, the TTL counting
// down, the fence, the waiters in order and how long each has waited, a
// timeline of recent grants, hand-offs, releases, expiries and
// revocations, doctor's findings, and the audit stream of revocations.
//
// A Console is an http.Handler; mount it under any path prefix:
//
//	con, err := console.New(console.Config{Locks: locks, Nodes: []redis.UniversalClient{rdb}})
//	if err != nil { ... }
//	defer con.Close()
//	mux.Handle("/locks/", http.StripPrefix("/locks", con))
//
// It is read-only unless Config.Revoke is set with an Authorize hook; the
// page never receives a token or a password. `dlock ui` serves it on its own.
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Config configures a Console.
type Config struct {
	// Locks is the dlock Client that revokes (Client.Revoke). The console
	// reads the keys it shows itself, on Nodes, with plain read commands
	// (what Inspect reads, without its script), so that a read-only Redis
	// user needs no EVAL: see docs/console.md.
	Locks *dlock.Client
	// Nodes are the Redis nodes Locks runs on: the console scans them for
	// lock keys, reads the wait queues and the audit stream there, and
	// listens to dlock's notifications (on a Cluster it reads on the
	// Interval only: hand-offs go out on sharded channels, which have no
	// pattern subscription). A *redis.ClusterClient is scanned master by
	// master.
	Nodes []redis.UniversalClient
	// Pattern selects the keys shown (SCAN MATCH; default "*"). dlock's own
	// keys (dlock:*) are never rows, and a key is shown while it is held or
	// has waiters.
	Pattern string
	// Limit bounds the keys shown from each node (default 1000): SCAN's
	// first. Past it the console counts on, up to ten times Limit, and the
	// page says that the list is cut short, how many keys match, and how
	// to see the rest (a narrower Pattern, a higher Limit).
	Limit int
	// Interval is how often the console scans for keys that appeared or
	// went without a notification (an uncontended grant or release
	// publishes nothing); default 1s. Each key is read again when a
	// notification names it, and about three times per TTL while held.
	Interval time.Duration
	// Revoke enables revocation from the page (Client.Revoke). It needs
	// Authorize.
	Revoke bool
	// Authorize decides each mutating request: who asks (recorded in the
	// audit stream as Revocation.By) and whether they may. The console
	// also checks a CSRF token and the request's origin first.
	Authorize func(r *http.Request) (who string, ok bool)
	// Auth names how Authorize authenticates, for the page: "basic" (the
	// browser sends its credentials), "token" (the page asks for a bearer
	// token to send) or "" (the embedding service's own).
	Auth string
	// Hosts, when set, are the only Host headers served (host or
	// host:port); others get 403. It stops DNS rebinding: a page of another
	// site that points its own name at the console's address. dlock ui
	// sets it to the loopback names when it listens on loopback.
	Hosts []string
}

// Console is the console's http.Handler and the loop that keeps its view
// of Redis current. Close stops the loop.
type Console struct {
	cfg  Config
	csrf string
	mux  *http.ServeMux
	view *view

	ctx    context.Context // ends with Close; revocations run on it
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ErrConfig is returned by New for a Config it cannot serve.
var ErrConfig = errors.New("console: invalid config")

// New returns a Console for cfg, and starts its loop.
func New(cfg Config) (*Console, error) {
	switch {
	case cfg.Locks == nil || len(cfg.Nodes) == 0:
		return nil, errors.Join(ErrConfig, errors.New("Locks and Nodes are required"))
	case cfg.Revoke && cfg.Authorize == nil:
		return nil, errors.Join(ErrConfig, errors.New("Revoke needs an Authorize hook"))
	case cfg.Limit < 0 || cfg.Interval < 0:
		return nil, errors.Join(ErrConfig, errors.New("a negative Limit or Interval"))
	}
	if cfg.Pattern == "" {
		cfg.Pattern = "*"
	}
	if cfg.Limit == 0 {
		cfg.Limit = 1000
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	c := &Console{cfg: cfg, csrf: hex.EncodeToString(b[:]), ctx: ctx, cancel: cancel, view: newView(cfg)}
	c.routes()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.view.run(ctx)
	}()
	return c, nil
}

// ServeHTTP serves the page, its assets, the state as JSON (api/state),
// its changes as Server-Sent Events (events) and revocations (api/revoke).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(c.cfg.Hosts) > 0 && !slices.Contains(c.cfg.Hosts, r.Host) && !slices.Contains(c.cfg.Hosts, hostOnly(r.Host)) {
		fail(w, http.StatusForbidden, "unknown Host: this console is served as "+strings.Join(c.cfg.Hosts, ", "))
		return
	}
	c.mux.ServeHTTP(w, r)
}

// hostOnly is a Host header without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// Close stops the console's loop and ends its event streams; a revocation
// under way stops waiting (its marks stand: the holds end with their
// leases). The Client and the nodes stay open.
func (c *Console) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}
