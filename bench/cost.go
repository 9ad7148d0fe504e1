package main

import (
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// cost is what a measurement cost, beside its wall time: redis-server CPU
// (INFO cpu, summed over the nodes), the bench process's CPU (getrusage:
// every library's client work runs here), and the commands the servers ran
// (INFO commandstats, summed).
type cost struct {
	serverCPU, clientCPU time.Duration
	commands             int64 // every command the servers ran, those inside scripts included
	scripts              int64 // script calls (EVALSHA, EVAL) that ran
	maxConns             int   // the most client connections one node had (herds)
}

func (c *cost) add(o cost) {
	c.serverCPU += o.serverCPU
	c.clientCPU += o.clientCPU
	c.commands += o.commands
	c.scripts += o.scripts
	c.maxConns = max(c.maxConns, o.maxConns)
}

// meter reads the servers' counters; one admin connection per node.
type meter struct{ admins []*redis.Client }

func newMeter(addrs []string) *meter {
	m := &meter{}
	for _, a := range addrs {
		m.admins = append(m.admins, redis.NewClient(&redis.Options{Addr: a, PoolSize: 1}))
	}
	return m
}

func (m *meter) close() {
	for _, r := range m.admins {
		r.Close()
	}
}

type sample struct {
	server, client    time.Duration
	commands, scripts int64
}

func (m *meter) sample() sample {
	var s sample
	for _, r := range m.admins {
		info := redistest.Info(r, "cpu")
		s.server += seconds(info["used_cpu_user"]) + seconds(info["used_cpu_sys"])
		for k, v := range redistest.Info(r, "commandstats") {
			if !strings.HasPrefix(k, "cmdstat_") || k == "cmdstat_info" {
				continue
			}
			fields := map[string]int64{}
			for _, f := range strings.Split(v, ",") {
				if name, val, ok := strings.Cut(f, "="); ok {
					fields[name], _ = strconv.ParseInt(val, 10, 64)
				}
			}
			s.commands += fields["calls"]
			if k == "cmdstat_evalsha" || k == "cmdstat_eval" {
				s.scripts += fields["calls"] - fields["failed_calls"]
			}
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s
}

// measure runs fn and returns what it cost; with conns, it also polls the
// nodes' connected_clients while fn runs and reports the most new
// connections any node had over what it had just before (the other
// libraries' idle pools, which live through the whole scenario, and the
// meter's own connection are in that baseline).
func (m *meter) measure(conns bool, fn func()) cost {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	most := 0
	if conns {
		base := make([]int, len(m.admins))
		for i, r := range m.admins {
			base[i] = redistest.ConnectedClients(r)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				for i, r := range m.admins {
					most = max(most, redistest.ConnectedClients(r)-base[i])
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	before := m.sample()
	fn()
	after := m.sample()
	close(stop)
	wg.Wait()
	return cost{serverCPU: after.server - before.server, clientCPU: after.client - before.client,
		commands: after.commands - before.commands - int64(len(m.admins)*2), scripts: after.scripts - before.scripts, maxConns: most}
}

func seconds(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Second))
}
