package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: how long its nodes wait for a silent master before its replica
// takes over (a failover here takes about twice this).
const ClusterNodeTimeout = 2 * time.Second

// StartClusterWithReplicas is SpawnCluster for tests: closed when tb ends.
func StartClusterWithReplicas(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	cl, err := SpawnCluster(masters, replicas)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// SpawnCluster starts a cluster of masters, each with replicas replicas,
// and waits until every node knows every other, every slot is served, and
// every replica's link to its master is up. Servers holds the masters,
// Replicas[i] the replicas of Servers[i] (as started: after a failover the
// roles move). Without replicas the node timeout is 5 s (no failover is
// expected); with them, ClusterNodeTimeout. The caller must Close it.
func SpawnCluster(masters, replicas int) (*Cluster, error) {
	timeout := "5000"
	if replicas > 0 {
		timeout = strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10)
	}
	cl := &Cluster{}
	if err := cl.spawnMasters(masters, timeout); err != nil {
		cl.Close()
		return nil, err
	}
	if replicas == 0 {
		return cl, nil
	}
	if err := cl.spawnReplicas(replicas, timeout); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

func (cl *Cluster) spawnReplicas(replicas int, timeout string) error {
	ctx := context.Background()
	ids := make([]string, len(cl.Servers))
	for i, s := range cl.Servers {
		c := redis.NewClient(s.Options())
		id, err := c.ClusterMyID(ctx).Result()
		c.Close()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER MYID: %w", err)
		}
		ids[i] = id
	}
	cl.Replicas = make([][]*Server, len(cl.Servers))
	for i := range cl.Servers {
		for j := 0; j < replicas; j++ {
			r, err := Spawn("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", timeout)
			if err != nil {
				return err
			}
			cl.Replicas[i] = append(cl.Replicas[i], r)
			c := redis.NewClient(r.Options())
			defer c.Close()
			if err := c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(cl.Servers[0].Port)).Err(); err != nil {
				return fmt.Errorf("redistest: CLUSTER MEET: %w", err)
			}
			// The replica must know its master before it can follow it.
			if err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
				return c.ClusterReplicate(ctx, ids[i]).Err() == nil, nil
			}); err != nil {
				return fmt.Errorf("redistest: CLUSTER REPLICATE: %w", err)
			}
		}
	}
	all := cl.Nodes()
	want := fmt.Sprintf("cluster_known_nodes:%d", len(all))
	for _, s := range all {
		c := redis.NewClient(s.Options())
		defer c.Close()
		if err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				return false, err
			}
			// Every node must see each slot's replicas too, or a
			// failover could pick none.
			slots, err := c.ClusterSlots(ctx).Result()
			if err != nil || len(slots) != len(cl.Servers) {
				return false, err
			}
			for _, sl := range slots {
				if len(sl.Nodes) != 1+replicas {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			return fmt.Errorf("redistest: cluster with replicas not ready: %w", err)
		}
	}
	for _, rs := range cl.Replicas {
		for _, r := range rs {
			c := redis.NewClient(r.Options())
			defer c.Close()
			if err := waitFor(30*time.Second, func(ctx context.Context) (bool, error) {
				info, err := c.Info(ctx, "replication").Result()
				return strings.Contains(info, "master_link_status:up"), err
			}); err != nil {
				return fmt.Errorf("redistest: cluster replica never synchronised: %w", err)
			}
		}
	}
	return nil
}

// MasterOf returns the server that serves key's slot as master now, as
// the first live node that answers CLUSTER SLOTS says. A node that does
// not answer (paused) is passed over within a fraction of a second.
func (cl *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	for _, s := range cl.Nodes() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = c.ClusterSlots(ctx).Result()
		}
		c.Close()
		if err != nil {
			continue
		}
		for _, sl := range slots {
			if int64(sl.Start) <= slot && slot <= int64(sl.End) && len(sl.Nodes) > 0 {
				return cl.byAddr(sl.Nodes[0].Addr)
			}
		}
	}
	return nil, fmt.Errorf("redistest: no node says who serves %q", key)
}

// WaitPromotion waits until a node other than old serves key's slot as
// master, and the cluster is ok again on every live node, and returns the
// new master.
func (cl *Cluster) WaitPromotion(key string, old *Server, timeout time.Duration) (*Server, error) {
	var promoted *Server
	err := waitFor(timeout, func(ctx context.Context) (bool, error) {
		m, err := cl.MasterOf(ctx, key)
		if err != nil || m == old {
			return false, err
		}
		promoted = m
		for _, s := range cl.Nodes() {
			if s == old {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			info, err := c.ClusterInfo(ctx).Result()
			c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no promotion after %v: %w", timeout, err)
	}
	return promoted, nil
}

// Nodes returns every node: the masters as started, then the replicas.
func (cl *Cluster) Nodes() []*Server {
	all := append([]*Server(nil), cl.Servers...)
	for _, rs := range cl.Replicas {
		all = append(all, rs...)
	}
	return all
}

func (cl *Cluster) byAddr(addr string) (*Server, error) {
	for _, s := range cl.Nodes() {
		if s.Addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: %s is not a node of this cluster", addr)
}
