package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SpawnReplica starts a server that replicates master, and waits until the
// initial synchronisation is done. The caller must Close it.
func SpawnReplica(master *Server, args ...string) (*Server, error) {
	return SpawnReplicaOf(master.Addr(), args...)
}

// SpawnReplicaOf is SpawnReplica for a master known only by its address
// (host:port), such as a proxy in front of it.
func SpawnReplicaOf(masterAddr string, args ...string) (*Server, error) {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, err
	}
	r, err := Spawn(append([]string{"--replicaof", host, port}, args...)...)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(r.Options())
	defer c.Close()
	if err := waitFor(startTimeout, func(ctx context.Context) (bool, error) {
		info, err := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up"), err
	}); err != nil {
		r.Close()
		return nil, fmt.Errorf("redistest: replica of %s never synchronised: %w", masterAddr, err)
	}
	return r, nil
}

// StartReplica is SpawnReplica for tests.
func StartReplica(tb testing.TB, master *Server, args ...string) *Server {
	tb.Helper()
	r, err := SpawnReplica(master, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	return r
}

// Cluster is a Redis Cluster of masters, each owning an equal share of
// the 16384 slots, and perhaps their replicas (cluster_replicas.go).
type Cluster struct {
	Servers  []*Server   // the masters, as started
	Replicas [][]*Server // Replicas[i]: the replicas of Servers[i], as started
}

// StartCluster starts a cluster of n masters and waits until every node
// reports cluster_state:ok and knows all the others; it is closed when tb
// ends.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	cl, err := SpawnCluster(n, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// Close stops every node and removes their directories.
func (cl *Cluster) Close() {
	for _, s := range cl.Nodes() {
		s.Close()
	}
}

// spawnMasters starts n masters with the given cluster-node-timeout (ms),
// gives each an equal share of the slots, joins them, and waits until
// every node reports cluster_state:ok, knows all the others and agrees on
// who owns every slot.
func (cl *Cluster) spawnMasters(n int, nodeTimeout string) error {
	for i := 0; i < n; i++ {
		s, err := Spawn("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", nodeTimeout)
		if err != nil {
			return err
		}
		cl.Servers = append(cl.Servers, s)
	}
	ctx := context.Background()
	clients := make([]*redis.Client, n)
	for i, s := range cl.Servers {
		clients[i] = redis.NewClient(s.Options())
		defer clients[i].Close()
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := clients[i].ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d: %w", lo, hi, err)
		}
	}
	for _, s := range cl.Servers[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(s.Port)).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET: %w", err)
		}
	}
	want := fmt.Sprintf("cluster_known_nodes:%d", n)
	for _, c := range clients {
		if err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want), err
		}); err != nil {
			return fmt.Errorf("redistest: cluster not ready: %w", err)
		}
	}
	// Every node must also agree on who owns every slot, or the first
	// commands would meet MOVED loops while gossip settles.
	for _, c := range clients {
		if err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
			slots, err := c.ClusterSlots(ctx).Result()
			return len(slots) == n, err
		}); err != nil {
			return fmt.Errorf("redistest: cluster slots not propagated: %w", err)
		}
	}
	return nil
}

// Addrs returns the nodes' addresses.
func (cl *Cluster) Addrs() []string {
	var addrs []string
	for _, s := range cl.Servers {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// Client returns a go-redis cluster client, closed when the test ends.
func (cl *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        cl.Addrs(),
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	})
	tb.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it returns true, or fails after timeout with its
// last error.
func waitFor(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("condition not met after %v", timeout)
			}
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
