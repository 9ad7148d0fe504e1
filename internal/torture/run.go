package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// Config sizes a run.
type Config struct {
	Exe      string        // the dlock binary, re-executed as the clients
	Clients  int           // client processes per scenario
	Duration time.Duration // per scenario
	TTL      time.Duration // the clients' lock TTL
	Hold     time.Duration // how long a client holds the lock each time
	// HerdClients and HerdWaiters size the herd scenarios: that many
	// client processes, each with that many goroutines waiting on one key
	// through one Client on go-redis's default options, each holding for
	// HerdHold once served.
	HerdClients, HerdWaiters int
	HerdHold                 time.Duration
	// OnEvent, if set, receives every client event as it arrives (for
	// metrics).
	OnEvent func(Event)
	// WorkerEnv is added to every client process's environment (the
	// command's tracing: where to export, and the scenario's trace
	// context).
	WorkerEnv []string
}

// herdBound is how long a herd's waiters keep trying before they give up
// (they normally finish far sooner, once all are served).
func (c Config) herdBound() time.Duration { return 3*c.Duration + 30*time.Second }

// Quick is the small, bounded configuration CI runs.
func Quick(exe string) Config {
	return Config{Exe: exe, Clients: 3, Duration: 4 * time.Second, TTL: 500 * time.Millisecond, Hold: 120 * time.Millisecond,
		HerdClients: 3, HerdWaiters: 100, HerdHold: time.Millisecond}
}

// Full is the default configuration.
func Full(exe string) Config {
	return Config{Exe: exe, Clients: 5, Duration: 20 * time.Second, TTL: time.Second, Hold: 250 * time.Millisecond,
		HerdClients: 10, HerdWaiters: 500, HerdHold: time.Millisecond}
}

// Scenario is a fault pattern, run in one or both modes.
type Scenario struct {
	Name  string   // short, for the report's first column
	Modes []string // "single" (one master, maybe with a replica), "redlock" (five masters)
	What  string   // what it does, for the report
	// ServerArgs are extra redis-server options; Nemesis injects faults
	// while the clients run, and must undo them before the run ends.
	ServerArgs []string
	Replica    bool // single mode: a replica behind its own proxy
	ReplicaAck int  // clients ask for this many replica acknowledgements
	// Herd runs Config.HerdClients processes of Config.HerdWaiters waiters
	// each, every waiter served once, instead of Clients looping.
	Herd bool
	// Primitive is what the clients take: "" a Lock, "election" a
	// Campaign's leadership, "semaphore" one of Permits permits,
	// "rwmutex" a read hold (odd clients) or the write hold (even ones).
	Primitive string
	Permits   int
	// Topology, when set, replaces the servers and proxies with a real
	// failover topology, reached as users reach it: "sentinel" (a master,
	// two replicas, three Sentinels; redis.NewFailoverClient) or "cluster"
	// (three masters with two replicas each; redis.NewClusterClient).
	Topology string
	// TTL and Hold, when longer than the Config's, replace them: a
	// promotion takes seconds, and only a holder whose lease and work
	// outlast it can meet the next holder.
	TTL, Hold time.Duration
	Nemesis   func(ctx context.Context, e *Env)
}

// Env is a running scenario: servers, the proxies in front of them, the
// client processes.
type Env struct {
	Cfg          Config
	Mode         string              // "single" or "redlock"
	Servers      []*redistest.Server // the masters
	Proxies      []*Proxy            // one per server; clients connect to these
	Replica      *redistest.Server   // single mode with Scenario.Replica
	ReplicaProxy *Proxy              // the replica's link to the master
	Sentinel     *redistest.Sentinel // with Scenario.Topology "sentinel"
	Cluster      *redistest.Cluster  // with Scenario.Topology "cluster"
	Key          string              // the clients' lock key
	workers      []*exec.Cmd
	perProcess   int // client IDs per process: 1, or a herd's waiters

	mu        sync.Mutex
	events    []Event
	failovers int     // masters killed by promote
	faults    []Fault // what the nemesis did, for the timeline
}

// Fault is one fault the nemesis injected, from From to To (wall clock,
// ns; To == From for an instant one, such as a kill).
type Fault struct {
	Name     string
	From, To int64
}

// fault records the start of a fault named name, and returns the
// function that records its end.
func (e *Env) fault(name string) (end func()) {
	from := time.Now().UnixNano()
	e.mu.Lock()
	i := len(e.faults)
	e.faults = append(e.faults, Fault{Name: name, From: from, To: from})
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		e.faults[i].To = time.Now().UnixNano()
		e.mu.Unlock()
	}
}

// holders returns the client processes (indexes into workers) that hold
// the lock, as far as the events tell.
func (e *Env) holders() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	open := map[int]bool{}
	for _, ev := range e.events {
		switch ev.Kind {
		case "grant":
			open[ev.Client] = true
		case "release", "lost", "killed":
			delete(open, ev.Client)
		}
	}
	var out []int
	for c := range open {
		out = append(out, c/max(1, e.perProcess))
	}
	return out
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Scenarios is every fault pattern `dlock torture` knows.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "baseline", Modes: []string{"single", "redlock"}, What: "no faults"},
		{Name: "client-pause", Modes: []string{"single", "redlock"}, What: "SIGSTOP a holder for 3 TTLs, then SIGCONT",
			Nemesis: func(ctx context.Context, e *Env) {
				for i := 0; i < 2 && ctx.Err() == nil; i++ {
					sleep(ctx, e.Cfg.Duration/5)
					pauseHolder(ctx, e)
				}
			}},
		{Name: "client-kill", Modes: []string{"single", "redlock"}, What: "SIGKILL a holder; the others go on without it",
			Nemesis: func(ctx context.Context, e *Env) { sleep(ctx, e.Cfg.Duration/4); killHolder(e) }},
		{Name: "kill-restart", Modes: []string{"single", "redlock"}, What: "kill a Redis node and restart it at once, without persistence",
			Nemesis: killRestart},
		{Name: "kill-restart-aof", Modes: []string{"single", "redlock"}, What: "the same, with appendfsync always",
			ServerArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}, Nemesis: killRestart},
		{Name: "redis-pause", Modes: []string{"single", "redlock"}, What: "SIGSTOP a Redis node for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) {
				sleep(ctx, e.Cfg.Duration/4)
				end := e.fault("SIGSTOP Redis")
				e.Servers[0].Pause()
				sleep(ctx, 3*e.Cfg.TTL)
				e.Servers[0].Resume()
				end()
			}},
		{Name: "failover", Modes: []string{"single"}, Replica: true, What: "cut replication, kill the master, promote the replica",
			Nemesis: failover},
		{Name: "failover+replica-ack", Modes: []string{"single"}, Replica: true, ReplicaAck: 1, What: "the same, clients using WithReplicaAck(1)",
			Nemesis: failover},
		{Name: "sentinel-failover", Modes: []string{"single"}, TTL: 6 * time.Second, Hold: 4 * time.Second, Topology: "sentinel", What: "Sentinel: kill the master just after a grant; a replica is promoted",
			Nemesis: promote},
		{Name: "sentinel-failover+replica-ack", Modes: []string{"single"}, TTL: 6 * time.Second, Hold: 4 * time.Second, Topology: "sentinel", ReplicaAck: 1, What: "the same, clients using WithReplicaAck(1)",
			Nemesis: promote},
		{Name: "cluster-failover", Modes: []string{"single"}, TTL: 6 * time.Second, Hold: 4 * time.Second, Topology: "cluster", What: "Cluster: kill the key's master just after a grant; its replica takes over",
			Nemesis: promote},
		{Name: "cluster-failover+replica-ack", Modes: []string{"single"}, TTL: 6 * time.Second, Hold: 4 * time.Second, Topology: "cluster", ReplicaAck: 1, What: "the same, clients using WithReplicaAck(1)",
			Nemesis: promote},
		{Name: "partition-minority", Modes: []string{"redlock"}, What: "black-hole 2 of 5 nodes for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) { partition(ctx, e, 2) }},
		{Name: "partition-majority", Modes: []string{"redlock"}, What: "black-hole 3 of 5 nodes for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) { partition(ctx, e, 3) }},
		{Name: "latency", Modes: []string{"single", "redlock"}, What: "add 0.4 TTL each way (a round trip near the TTL) for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) {
				sleep(ctx, e.Cfg.Duration/4)
				defer e.fault("latency 0.4 TTL each way")()
				for _, p := range e.Proxies {
					p.SetDelay(e.Cfg.TTL * 4 / 10)
				}
				sleep(ctx, 3*e.Cfg.TTL)
				for _, p := range e.Proxies {
					p.SetDelay(0)
				}
			}},
		{Name: "renew-unlock", Modes: []string{"single", "redlock"}, Primitive: "renewed",
			What: "clients hold a Lock auto-renewed every 10 ms and Unlock it, at times while a renewal is in flight (redisson #7272)"},
		{Name: "election", Modes: []string{"single", "redlock"}, Primitive: "election", What: "clients campaign, lead and resign; no faults"},
		{Name: "election+client-pause", Modes: []string{"single", "redlock"}, Primitive: "election", What: "SIGSTOP the leader for 3 TTLs, then SIGCONT",
			Nemesis: func(ctx context.Context, e *Env) { sleep(ctx, e.Cfg.Duration/4); pauseHolder(ctx, e) }},
		{Name: "election+client-kill", Modes: []string{"single", "redlock"}, Primitive: "election", What: "SIGKILL the leader; a standby takes over",
			Nemesis: func(ctx context.Context, e *Env) { sleep(ctx, e.Cfg.Duration/4); killHolder(e) }},
		{Name: "semaphore", Modes: []string{"single"}, Primitive: "semaphore", Permits: 2, What: "clients take one of 2 permits; no faults"},
		{Name: "semaphore+client-pause", Modes: []string{"single"}, Primitive: "semaphore", Permits: 2, What: "SIGSTOP a permit holder for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) { sleep(ctx, e.Cfg.Duration/4); pauseHolder(ctx, e) }},
		{Name: "semaphore+kill-restart", Modes: []string{"single"}, Primitive: "semaphore", Permits: 2, What: "kill Redis and restart it without persistence (the permits are lost)",
			Nemesis: killRestart},
		{Name: "rwmutex", Modes: []string{"single"}, Primitive: "rwmutex", What: "odd clients read, even clients write (fenced); no faults"},
		{Name: "rwmutex+client-pause", Modes: []string{"single"}, Primitive: "rwmutex", What: "SIGSTOP a holder for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) { sleep(ctx, e.Cfg.Duration/4); pauseHolder(ctx, e) }},
		{Name: "herd", Modes: []string{"single", "redlock"}, Herd: true, What: "processes × waiters on one key, each served once, no faults"},
		{Name: "herd+client-pause", Modes: []string{"single", "redlock"}, Herd: true, What: "the herd; SIGSTOP a holder's process for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) { e.firstGrant(ctx); pauseHolder(ctx, e) }},
		{Name: "herd+redis-pause", Modes: []string{"single"}, Herd: true, What: "the herd; SIGSTOP the Redis node for 3 TTLs",
			Nemesis: func(ctx context.Context, e *Env) {
				e.firstGrant(ctx)
				defer e.fault("SIGSTOP Redis")()
				e.Servers[0].Pause()
				sleep(ctx, 3*e.Cfg.TTL)
				e.Servers[0].Resume()
			}},
		{Name: "herd+kill-restart", Modes: []string{"single"}, Herd: true, What: "the herd; kill Redis and restart it without persistence (the queue is lost)",
			Nemesis: func(ctx context.Context, e *Env) {
				e.firstGrant(ctx)
				defer e.fault("kill + restart Redis")()
				e.Servers[0].Kill()
				_ = e.Servers[0].Restart()
			}},
		{Name: "herd+outage", Modes: []string{"single"}, Herd: true, What: "the herd; Redis down for 3 TTLs, back without persistence",
			Nemesis: func(ctx context.Context, e *Env) {
				e.firstGrant(ctx)
				defer e.fault("Redis down")()
				e.Servers[0].Kill()
				sleep(ctx, 3*e.Cfg.TTL)
				_ = e.Servers[0].Restart()
			}},
		{Name: "herd+pubsub-kill", Modes: []string{"single"}, Herd: true, What: "the herd; CLIENT KILL TYPE pubsub every 20 ms for 3 TTLs",
			Nemesis: killPubSub},
		{Name: "herd+waiter-kill", Modes: []string{"single"}, Herd: true, What: "the herd; SIGKILL a process whose waiters all wait",
			Nemesis: func(ctx context.Context, e *Env) { e.firstGrant(ctx); killWaiter(e) }},
		{Name: "herd+waiter-pause", Modes: []string{"single"}, Herd: true, What: "the herd; SIGSTOP a process whose waiters all wait, for 3 TTLs (past their liveness)",
			Nemesis: func(ctx context.Context, e *Env) { e.firstGrant(ctx); pauseWaiter(ctx, e) }},
	}
}

// killPubSub kills every pub/sub connection of the first server every 20
// ms for 3 TTLs (redisson #5761: hand-off messages lost with them).
func killPubSub(ctx context.Context, e *Env) {
	e.firstGrant(ctx)
	defer e.fault("CLIENT KILL TYPE pubsub")()
	admin := redis.NewClient(e.Servers[0].Options())
	defer admin.Close()
	for end := time.Now().Add(3 * e.Cfg.TTL); ctx.Err() == nil && time.Now().Before(end); sleep(ctx, 20*time.Millisecond) {
		admin.ClientKillByFilter(ctx, "TYPE", "pubsub")
	}
}

// pauseHolder stops a holder's process for 3 TTLs (while holders exist).
func pauseHolder(ctx context.Context, e *Env) {
	if hs := e.holders(); len(hs) > 0 {
		w := e.workers[hs[0]]
		end := e.fault(fmt.Sprintf("SIGSTOP client %d", hs[0]))
		_ = w.Process.Signal(sigStop)
		sleep(ctx, 3*e.Cfg.TTL)
		_ = w.Process.Signal(sigCont)
		end()
	}
}

// killHolder kills a holder's process (if any holds), recording the moment
// as its "killed" event: a dead process writes nothing, so its hold ends
// there, whatever the server still keeps for it.
func killHolder(e *Env) {
	hs := e.holders()
	if len(hs) == 0 {
		return
	}
	e.mu.Lock()
	e.events = append(e.events, Event{Kind: "killed", Client: hs[0], At: time.Now().UnixNano()})
	e.mu.Unlock()
	e.fault(fmt.Sprintf("SIGKILL client %d", hs[0]))
	_ = e.workers[hs[0]].Process.Kill()
}

// killWaiter kills a client process whose waiters all wait (redisson
// #2278: a crashed waiter wedged the queue). Its waiters never report; the
// others must all be served.
func killWaiter(e *Env) {
	if i := e.waitingProcess(); i >= 0 {
		e.fault(fmt.Sprintf("SIGKILL client %d, waiting", i))
		_ = e.workers[i].Process.Kill()
	}
}

// pauseWaiter stops a client process whose waiters all wait for 3 TTLs,
// well past their liveness, then lets it go on (etcd #19597: a waiter cut
// off until its session expired later believed it held the lock). Its
// waiters are skipped meanwhile; resumed, they must line up again and be
// served once, with fences the guard accepts.
func pauseWaiter(ctx context.Context, e *Env) {
	i := e.waitingProcess()
	if i < 0 {
		return
	}
	defer e.fault(fmt.Sprintf("SIGSTOP client %d, waiting", i))()
	_ = e.workers[i].Process.Signal(sigStop)
	sleep(ctx, 3*e.Cfg.TTL)
	_ = e.workers[i].Process.Signal(sigCont)
}

// waitingProcess returns a client process none of whose waiters holds the
// lock or has been served, as far as the events tell, else one that holds
// nothing; -1 if none (a fault that found no victim is not recorded).
func (e *Env) waitingProcess() int {
	busy := map[int]bool{}
	for _, p := range e.holders() {
		busy[p] = true
	}
	e.mu.Lock()
	for _, ev := range e.events {
		if ev.Kind == "served" || ev.Kind == "grant" {
			busy[ev.Client/max(1, e.perProcess)] = true
		}
	}
	e.mu.Unlock()
	for i := len(e.workers) - 1; i >= 0; i-- { // the last started are the likeliest to wait
		if !busy[i] {
			return i
		}
	}
	holding := map[int]bool{}
	for _, p := range e.holders() {
		holding[p] = true
	}
	for i := len(e.workers) - 1; i >= 0; i-- { // else one whose waiters were partly served
		if !holding[i] {
			return i
		}
	}
	return -1
}

// firstGrant waits until some client holds the lock, and a little longer,
// so that a herd's fault strikes while most of it still waits.
func (e *Env) firstGrant(ctx context.Context) {
	for ctx.Err() == nil && len(e.holders()) == 0 {
		sleep(ctx, time.Millisecond)
	}
	sleep(ctx, 50*time.Millisecond)
}

func killRestart(ctx context.Context, e *Env) {
	sleep(ctx, e.Cfg.Duration/4)
	end := e.fault("kill + restart Redis")
	e.Servers[0].Kill()
	_ = e.Servers[0].Restart()
	end()
}

// promote kills the master of the clients' key, in a Sentinel or Cluster
// topology, and waits for the promotion of a replica; twice, while the run
// lasts. The first kill comes half a second after a grant (so that a
// hand-off's one-second claim has been extended to the TTL, queue.go):
// whether the replicas have the grant is up to the replication race. The
// second makes the seeds' lost grant happen: the master's replicas are cut
// off (redistest.LoseReplication) just before the holder lets go, and the
// kill comes half a second after the hand-off to the next, which none of
// them has. The replicas are kept away a second and a half at most, or the
// failover would shun them; with WithReplicaAck no grant is made meanwhile
// (that is its point), and the master is killed all the same.
func promote(ctx context.Context, e *Env) {
	for round := 0; round < 2 && ctx.Err() == nil; round++ {
		sleep(ctx, e.Cfg.Duration/5)
		old, err := e.master(ctx)
		if err != nil {
			return
		}
		if round == 0 {
			e.nextGrant(ctx, time.Hour)
			old.Kill()
		} else {
			// Cut the replicas off just before the holder lets go, so
			// that the hand-off to the next comes while they are away.
			if at := e.lastGrant(); at > 0 {
				sleep(ctx, time.Until(time.Unix(0, at).Add(e.Cfg.Hold-100*time.Millisecond)))
			}
			resume, err := redistest.LoseReplication(ctx, old, e.Servers)
			if err != nil {
				return
			}
			sleep(ctx, 50*time.Millisecond) // a grant made before the cut may be reported after it
			e.nextGrant(ctx, time.Second)
			old.Kill()
			resume()
		}
		e.mu.Lock()
		e.failovers++
		e.mu.Unlock()
		end := e.fault(fmt.Sprintf("master killed (%d), promotion", round+1))
		if e.Sentinel != nil {
			_, err = e.Sentinel.WaitPromotion(old, time.Minute)
		} else {
			_, err = e.Cluster.WaitPromotion(e.Key, old, time.Minute)
		}
		end()
		if err != nil {
			return
		}
	}
}

// lastGrant is when the latest grant reported was made (wall clock, ns),
// or 0.
func (e *Env) lastGrant() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.events) - 1; i >= 0; i-- {
		if e.events[i].Kind == "grant" {
			return e.events[i].At
		}
	}
	return 0
}

// nextGrant waits up to d for a grant reported after now, then half a
// second more, and says whether one came.
func (e *Env) nextGrant(ctx context.Context, d time.Duration) bool {
	granted := e.grants()
	for start := time.Now(); ctx.Err() == nil && e.grants() == granted; {
		if time.Since(start) > d {
			return false
		}
		sleep(ctx, time.Millisecond)
	}
	sleep(ctx, 500*time.Millisecond)
	return ctx.Err() == nil
}

// master is the data node that serves the clients' key now.
func (e *Env) master(ctx context.Context) (*redistest.Server, error) {
	if e.Sentinel != nil {
		return e.Sentinel.Master(ctx)
	}
	return e.Cluster.MasterOf(ctx, e.Key)
}

// grants counts the grants reported so far.
func (e *Env) grants() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev.Kind == "grant" {
			n++
		}
	}
	return n
}

func partition(ctx context.Context, e *Env, n int) {
	sleep(ctx, e.Cfg.Duration/4)
	defer e.fault(fmt.Sprintf("partition %d of %d", n, len(e.Proxies)))()
	for _, p := range e.Proxies[:n] {
		p.SetDrop(true)
	}
	sleep(ctx, 3*e.Cfg.TTL)
	for _, p := range e.Proxies[:n] {
		p.SetDrop(false)
		p.Cut() // connections that lost traffic are broken
	}
}

// failover cuts the replica's link to the master, lets the clients run on
// the master alone, kills the master and sends the clients to the promoted
// replica: grants the replica never saw are lost.
func failover(ctx context.Context, e *Env) {
	sleep(ctx, e.Cfg.Duration/4)
	defer e.fault("replication cut, master killed, replica promoted")()
	e.ReplicaProxy.SetDrop(true)
	sleep(ctx, e.Cfg.Duration/8)
	// Kill the master just after a grant, as a crash at the worst moment:
	// the holder keeps working while the promoted replica lets the next in.
	for ctx.Err() == nil && len(e.holders()) == 0 {
		sleep(ctx, time.Millisecond)
	}
	e.Servers[0].Kill()
	rdb := redis.NewClient(e.Replica.Options())
	defer rdb.Close()
	_ = rdb.Do(context.Background(), "REPLICAOF", "NO", "ONE").Err()
	e.Proxies[0].SetTarget(e.Replica.Addr())
}

// Run runs one scenario in one mode and checks its history.
func Run(cfg Config, sc Scenario, mode string) (Result, error) {
	cfg.TTL, cfg.Hold = max(cfg.TTL, sc.TTL), max(cfg.Hold, sc.Hold)
	e := &Env{Cfg: cfg, Mode: mode, Key: "torture:" + sc.Name}
	defer e.close()
	if err := e.start(sc, mode); err != nil {
		return Result{}, err
	}
	res, err := NewResource()
	if err != nil {
		return Result{}, err
	}
	defer res.Close()

	start := time.Now()
	clients, hold, duration, waiters := cfg.Clients, cfg.Hold, cfg.Duration, 0
	bound := cfg.Duration + 10*cfg.TTL + 10*time.Second
	if sc.Herd {
		clients, hold, duration, waiters = cfg.HerdClients, cfg.HerdHold, cfg.herdBound(), cfg.HerdWaiters
		bound = duration + 10*time.Second
	}
	e.perProcess = waiters
	var watch *leaderWatch
	observeStale := false
	if sc.Primitive == "election" {
		watch = e.watchLeader(sc.Topology)
	}
	stopSampling := e.sampleConnections()
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		args := []string{"torture-worker", "--id", strconv.Itoa(i), "--resource", res.Addr(),
			"--ttl", cfg.TTL.String(), "--hold", hold.String(), "--duration", duration.String(),
			"--key", e.Key, "--topology", sc.Topology, "--replica-ack", strconv.Itoa(sc.ReplicaAck), "--waiters", strconv.Itoa(waiters),
			"--primitive", sc.Primitive, "--permits", strconv.Itoa(sc.Permits)}
		for _, a := range e.addrs() {
			args = append(args, "--node", a)
		}
		cmd := exec.Command(cfg.Exe, args...)
		if len(cfg.WorkerEnv) > 0 {
			cmd.Env = append(os.Environ(), cfg.WorkerEnv...)
		}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return Result{}, err
		}
		if err := cmd.Start(); err != nil {
			return Result{}, err
		}
		e.workers = append(e.workers, cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var ev Event
				if json.Unmarshal(sc.Bytes(), &ev) == nil {
					e.mu.Lock()
					e.events = append(e.events, ev)
					e.mu.Unlock()
					if cfg.OnEvent != nil {
						cfg.OnEvent(ev)
					}
				}
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration)
	defer cancel()
	if sc.Nemesis != nil {
		sc.Nemesis(ctx, e)
	}
	// Clients stop on their own after the duration; a paused one is
	// continued, and one that hangs is killed.
	done := make(chan struct{})
	go func() {
		wg.Wait()
		for _, w := range e.workers {
			_ = w.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		for _, w := range e.workers {
			_ = w.Process.Kill()
		}
		<-done
	}
	if watch != nil && !watch.agrees(10*cfg.TTL+5*time.Second) {
		observeStale = true
	}
	end := time.Now().UnixNano()
	maxConns := stopSampling()
	e.mu.Lock()
	writes, err := res.Log()
	if err != nil {
		e.mu.Unlock()
		return Result{}, err
	}
	for _, ev := range e.events {
		if ev.Kind == "refused" {
			writes = append(writes, Write{Client: ev.Client, Fence: ev.Fence, At: ev.At})
		}
	}
	r := check(e.events, writes, end, max(sc.Permits, 1), sc.Primitive == "rwmutex")
	r.ObserveStale = observeStale
	e.mu.Unlock()
	r.Scenario, r.Mode, r.Clients, r.Seconds = sc.Name, mode, clients, time.Since(start).Seconds()
	r.History = &History{Start: start.UnixNano(), End: end, Lanes: clients, PerLane: max(1, e.perProcess),
		Events: append([]Event(nil), e.events...), Writes: writes, Faults: append([]Fault(nil), e.faults...)}
	r.MaxConnections = maxConns
	r.Failovers = e.failovers
	return r, nil
}

// start brings up the scenario's Redis: a Sentinel or Cluster topology,
// or servers (one, or five for Redlock) with a proxy in front of each, and
// a replica behind its own proxy if asked for.
func (e *Env) start(sc Scenario, mode string) error {
	var err error
	switch sc.Topology {
	case "sentinel":
		if e.Sentinel, err = redistest.SpawnSentinel(2, sc.ServerArgs...); err == nil {
			e.Servers = e.Sentinel.Servers
		}
		return err
	case "cluster":
		if e.Cluster, err = redistest.SpawnCluster(3, 2); err == nil {
			e.Servers = e.Cluster.Nodes()
		}
		return err
	}
	nodes := 1
	if mode == "redlock" {
		nodes = 5
	}
	for i := 0; i < nodes; i++ {
		s, err := redistest.Spawn(sc.ServerArgs...)
		if err != nil {
			return err
		}
		e.Servers = append(e.Servers, s)
		p, err := NewProxy(s.Addr())
		if err != nil {
			return err
		}
		e.Proxies = append(e.Proxies, p)
	}
	if sc.Replica {
		rp, err := NewProxy(e.Servers[0].Addr())
		if err != nil {
			return err
		}
		e.ReplicaProxy = rp
		r, err := redistest.SpawnReplicaOf(rp.Addr(), sc.ServerArgs...)
		if err != nil {
			return err
		}
		e.Replica = r
	}
	return nil
}

// addrs are what the clients connect to: the proxies, the Sentinels, or
// the cluster's masters (seeds).
func (e *Env) addrs() []string {
	switch {
	case e.Sentinel != nil:
		return e.Sentinel.Addrs()
	case e.Cluster != nil:
		return e.Cluster.Addrs()
	}
	var out []string
	for _, p := range e.Proxies {
		out = append(out, p.Addr())
	}
	return out
}

// sampleConnections polls every master's connected_clients (less its own
// connection) until stopped, and returns the most any one of them had.
func (e *Env) sampleConnections() (stop func() int) {
	var rdbs []*redis.Client
	for _, s := range e.Servers {
		rdbs = append(rdbs, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 1}))
	}
	quit, done := make(chan struct{}), make(chan int)
	go func() {
		most := 0
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			for _, rdb := range rdbs {
				if n := redistest.ConnectedClients(rdb); n-1 > most {
					most = n - 1
				}
			}
			select {
			case <-t.C:
			case <-quit:
				for _, rdb := range rdbs {
					rdb.Close()
				}
				done <- most
				return
			}
		}
	}()
	return func() int { close(quit); return <-done }
}

func (e *Env) close() {
	for _, w := range e.workers {
		if w.ProcessState == nil {
			_ = w.Process.Signal(sigCont)
			_ = w.Process.Kill()
		}
	}
	for _, p := range e.Proxies {
		p.Close()
	}
	if e.ReplicaProxy != nil {
		e.ReplicaProxy.Close()
	}
	switch {
	case e.Sentinel != nil:
		e.Sentinel.Close()
	case e.Cluster != nil:
		e.Cluster.Close()
	default:
		for _, s := range e.Servers {
			s.Close()
		}
	}
	if e.Replica != nil {
		e.Replica.Close()
	}
}
