package redistest

import (
	"context"

	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMasterName is the name the Sentinels monitor the master by.
const SentinelMasterName = "dlock"

// SentinelDownAfter is how long the Sentinels wait for a silent master
// before they fail it over: a failover here takes about this plus a second
// or two.
const SentinelDownAfter = time.Second

// Sentinel is a master, its replicas and three Sentinels monitoring them,
// as production runs them (quorum 2). Servers holds the master first, then
// the replicas; after a failover the roles move, and Master says who has
// the master's role now.
type Sentinel struct {
	Servers   []*Server // the data nodes, the first one the first master
	Sentinels []*Server // redis-server --sentinel processes
}

// SpawnSentinel starts a master, replicas replicas of it, and three
// Sentinels, and waits until the replicas are in sync and every Sentinel
// knows the master, every replica and the other Sentinels. The caller must
// Close it. args go to the data nodes (e.g. "--appendonly", "yes").
func SpawnSentinel(replicas int, args ...string) (*Sentinel, error) {
	st := &Sentinel{}
	m, err := Spawn(args...)
	if err != nil {
		return nil, err
	}
	st.Servers = append(st.Servers, m)
	for i := 0; i < replicas; i++ {
		r, err := SpawnReplica(m, args...)
		if err != nil {
			st.Close()
			return nil, err
		}
		st.Servers = append(st.Servers, r)
	}
	for i := 0; i < 3; i++ {
		s, err := spawnSentinel(m)
		if err != nil {
			st.Close()
			return nil, err
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	if err := st.waitAgreed(replicas); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// StartSentinel is SpawnSentinel for tests: closed when tb ends.
func StartSentinel(tb testing.TB, replicas int, args ...string) *Sentinel {
	tb.Helper()
	st, err := SpawnSentinel(replicas, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	return st
}

// spawnSentinel starts one Sentinel monitoring m, with quorum 2.
func spawnSentinel(m *Server) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 2\n", SentinelMasterName, m.Port, SentinelDownAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return spawn(&Server{Dir: dir, sentinelConf: conf}, "")
}

// waitAgreed waits until every Sentinel sees the master, its replicas and
// the two other Sentinels.
func (st *Sentinel) waitAgreed(replicas int) error {
	for _, s := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
			m, err := c.Master(ctx, SentinelMasterName).Result()
			if err != nil {
				return false, err
			}
			return m["num-slaves"] == strconv.Itoa(replicas) && m["num-other-sentinels"] == "2" && !strings.Contains(m["flags"], "down"), nil
		})
		c.Close()
		if err != nil {
			return fmt.Errorf("redistest: Sentinels never agreed: %w", err)
		}
	}
	return nil
}

// Addrs returns the Sentinels' addresses, for redis.FailoverOptions.
func (st *Sentinel) Addrs() []string {
	var out []string
	for _, s := range st.Sentinels {
		out = append(out, s.Addr())
	}
	return out
}

// FailoverOptions returns go-redis options for a client of the master
// through the Sentinels, with timeouts short enough for tests.
func (st *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMasterName, SentinelAddrs: st.Addrs(),
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}
}

// Client returns a failover client of the master, closed when tb ends.
func (st *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(st.FailoverOptions())
	tb.Cleanup(func() { c.Close() })
	return c
}

// MasterAddr asks the Sentinels who the master is now.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var lastErr error
	for _, s := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, SentinelMasterName).Result()
		c.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("redistest: no Sentinel names the master: %w", lastErr)
}

// Master returns the data node the Sentinels name as the master.
func (st *Sentinel) Master(ctx context.Context) (*Server, error) {
	addr, err := st.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range st.Servers {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: the Sentinels name %s, not one of the data nodes", addr)
}

// WaitPromotion waits until the Sentinels name a master other than old
// and it answers as a master, and returns it.
func (st *Sentinel) WaitPromotion(old *Server, timeout time.Duration) (*Server, error) {
	var promoted *Server
	err := waitFor(timeout, func(ctx context.Context) (bool, error) {
		m, err := st.Master(ctx)
		if err != nil || m == old {
			return false, err
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		promoted = m
		return strings.Contains(info, "role:master"), err
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no promotion after %v: %w", timeout, err)
	}
	return promoted, nil
}

// Close stops every process and removes their directories.
func (st *Sentinel) Close() {
	for _, s := range append(st.Sentinels, st.Servers...) {
		s.Close()
	}
}

// LoseReplication makes master's next writes reach none of its replicas
// (found among servers): each is paused (SIGSTOP), then the master drops
// their links (CLIENT KILL TYPE replica), so none can reconnect, and so
// none receives what the master writes, until resume continues them. A
// write, then a kill of the master, then resume, is the seeds' lost grant.
func LoseReplication(ctx context.Context, master *Server, servers []*Server) (resume func(), err error) {
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	var paused []*Server
	resume = func() {
		for _, s := range paused {
			s.Resume()
		}
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "port=") {
			continue
		}
		port := strings.Split(strings.SplitN(line, "port=", 2)[1], ",")[0]
		for _, s := range servers {
			if strconv.Itoa(s.Port) == port {
				s.Pause()
				paused = append(paused, s)
			}
		}
	}
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		resume()
		return nil, err
	}
	return resume, nil
}
