package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	flag "github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/torture"
)

const tortureHelp = `
Inject faults into real processes and report, with numbers, what holds and
what breaks. It starts its own redis-server processes on loopback, an
in-process proxy in front of each (to delay, black-hole or cut traffic, or
redirect it after a failover), a fenced resource (a redis-server of its own,
written through guard.Redis, as users would), and N client processes (this
binary again) that loop: obtain the lock, write to the resource with their
fence while holding it, release. A nemesis injects the scenario's
faults meanwhile. Then the history is checked:

  overlaps           pairs of clients holding at once (expected in some scenarios)
  stale_rejected     writes the resource refused because a newer fence had written
  stale_accepted     writes accepted from an older grant after a newer one wrote: MUST BE 0
  fence_regressions  grants whose fence is not above every grant known to precede them: MUST BE 0
  loss notices       holders told the lock was lost, and how many in time
  observe            elections: once the clients stop, Observe's last report
                     (from a watcher in this process) equals Leader: MUST HOLD
  resurrected        renew-unlock: keys found holding a token after its Unlock
                     released it (a late renewal): MUST BE 0

Scenarios (single = one master; redlock = five): baseline, client-pause,
client-kill, kill-restart, kill-restart-aof, redis-pause, failover,
failover+replica-ack, partition-minority, partition-majority, latency; with
real promotion: sentinel-failover and cluster-failover (a master, two
replicas and three Sentinels through redis.NewFailoverClient; three masters
with two replicas each through redis.NewClusterClient), each also
+replica-ack, where the master of the key is killed just after a grant,
then (time allowing) just after a grant its replicas missed (served: how
many failovers); the
renew-unlock (a Lock auto-renewed every 10 ms, unlocked, at times while a
renewal is in flight); the other primitives: election, election+client-pause, election+client-kill,
semaphore, semaphore+client-pause, semaphore+kill-restart, rwmutex,
rwmutex+client-pause; and the herds: herd, herd+client-pause,
herd+redis-pause, herd+kill-restart, herd+outage (Redis down for 3 TTLs),
herd+pubsub-kill (every pub/sub connection killed, again and again),
herd+waiter-kill (a process whose waiters all wait is killed),
herd+waiter-pause (one is stopped past its waiters' liveness), where 10 processes (--quick: 3) of 500
waiters each (--quick: 100) on go-redis's default options wait on one key
until each is served once:

  served             waiters that obtained the lock, of all: MUST BE ALL;
                     after a kill, grants to the others: MUST BE SOME
  max conns          the most client connections a master saw at once

The report is two tables that fit 100 columns: what must hold (REFUSED is
stale_rejected, STALE stale_accepted, REGRESS fence_regressions), then how
the clients fared (loss notices, served, max conns, errors); --json gives
every figure under the names above.

Exit codes: 0 every scenario kept stale_accepted and fence_regressions at 0
(served every herd waiter, and went on after a kill); 1 one did not; 64 usage; 70 the run itself failed.

With --report DIR it also writes, per run, a timeline (DIR/SCENARIO-MODE.svg):
one lane per client process, each hold a bar from grant to release or loss
notice (red where two clients overlap), the resource's accepted writes as
green ticks and refused ones as red crosses, each fault as a shaded band
with its name; and DIR/index.html, the table with links to them.

Examples:
  dlock torture --quick
  dlock torture --scenario failover --duration 30s
  dlock torture --json > torture.jsonl
  dlock torture --scenario client-pause --report report/
`

func tortureMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("torture", "[flags]", tortureHelp, stderr)
	var (
		scenario = fs.String("scenario", "all", "scenario `NAME`, or all")
		duration = durationFlag(fs, "duration", 0, "how long each scenario runs (default 20s; --quick: 4s)")
		clients  = fs.Int("clients", 0, "client processes (default 5; --quick: 3)")
		quick    = fs.Bool("quick", false, "every scenario, small and bounded (CI)")
		asJSON   = fs.Bool("json", false, "one JSON object per scenario")
		report   = fs.String("report", "", "write each run's timeline (an SVG) and an index.html linking them into `DIR`")
		mf       metricsFlag
		of       otlpFlag
	)
	mf.register(fs)
	of.register(fs)
	if stop, code := parse(fs, args); stop {
		return code
	}
	metrics, stopMetrics, err := mf.serve(stderr, nil)
	if err != nil {
		return usageError(stderr, "torture: %v", err)
	}
	defer stopMetrics()
	tr, err := of.start("dlock-torture", stderr)
	if err != nil {
		return usageError(stderr, "torture: %v", err)
	}
	defer tr.stop()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "dlock: torture: %v\n", err)
		return exitSoftware
	}
	cfg := torture.Full(exe)
	if *quick {
		cfg = torture.Quick(exe)
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *clients > 0 {
		cfg.Clients = *clients
	}
	if metrics != nil {
		cfg.OnEvent = func(e torture.Event) {
			if ev, ok := e.DlockEvent(); ok {
				metrics.Observe(ev)
			}
		}
	}
	var runs []torture.Scenario
	for _, sc := range torture.Scenarios() {
		if *scenario == "all" || sc.Name == *scenario {
			runs = append(runs, sc)
		}
	}
	if len(runs) == 0 {
		return usageError(stderr, "torture: unknown scenario %q", *scenario)
	}

	if !*asJSON {
		fmt.Fprintf(stdout, "dlock torture: %d clients, %v per scenario, TTL %v\n\n", cfg.Clients, cfg.Duration, cfg.TTL)
	}
	var table []torture.Result
	if *report != "" {
		if err := os.MkdirAll(*report, 0o755); err != nil {
			return usageError(stderr, "torture: --report: %v", err)
		}
	}
	var results []torture.Result
	failed, passed := 0, 0
	for _, sc := range runs {
		for _, mode := range sc.Modes {
			r, err := tracedRun(tr, of.endpoint, cfg, sc, mode)
			if err != nil {
				fmt.Fprintf(stderr, "dlock: torture: %s/%s: %v\n", sc.Name, mode, err)
				return exitSoftware
			}
			if *report != "" {
				if err := writeTimeline(*report, r, sc); err != nil {
					fmt.Fprintf(stderr, "dlock: torture: --report: %v\n", err)
					return exitSoftware
				}
				results = append(results, r)
			}
			if r.OK() {
				passed++
			} else {
				failed++
			}
			if *asJSON {
				_ = json.NewEncoder(stdout).Encode(r)
				continue
			}
			fmt.Fprintf(stderr, "dlock: torture: %s/%s done\n", sc.Name, mode)
			table = append(table, r)
		}
	}
	if !*asJSON {
		writeResults(stdout, table)
	}
	if *report != "" {
		if err := writeFile(filepath.Join(*report, "index.html"), func(w io.Writer) error { return torture.WriteIndex(w, results) }); err != nil {
			fmt.Fprintf(stderr, "dlock: torture: --report: %v\n", err)
			return exitSoftware
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "\ntorture: %d passed, %d failed\n", passed, failed)
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "dlock: torture: %d scenario(s) accepted a stale write, regressed a fence, left a waiter unserved, stopped after a kill, observed a stale leader or let a renewal outlive an Unlock\n", failed)
		return 1
	}
	return exitOK
}

// tracedRun runs a scenario in a span of its own (when tracing), which
// its client processes' spans continue (TRACEPARENT), with the nemesis'
// faults as child spans over their real times.
func tracedRun(tr *tracing, endpoint string, cfg torture.Config, sc torture.Scenario, mode string) (torture.Result, error) {
	if tr == nil {
		return torture.Run(cfg, sc, mode)
	}
	ctx, span := tr.span(context.Background(), "dlock torture "+sc.Name+"/"+mode,
		attribute.String("dlock.torture.scenario", sc.Name), attribute.String("dlock.torture.mode", mode))
	defer span.End()
	cfg.WorkerEnv = append(traceparent(ctx), otlpEnv+"="+endpoint)
	r, err := torture.Run(cfg, sc, mode)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return r, err
	}
	if h := r.History; h != nil {
		for _, f := range h.Faults {
			_, fs := tr.tracer().Start(ctx, "fault: "+f.Name, trace.WithTimestamp(time.Unix(0, f.From)),
				trace.WithAttributes(attribute.String("dlock.torture.fault", f.Name)))
			fs.End(trace.WithTimestamp(time.Unix(0, f.To)))
		}
	}
	span.SetAttributes(attribute.Int("dlock.torture.grants", r.Grants), attribute.Int("dlock.torture.overlaps", r.Overlaps),
		attribute.Int("dlock.torture.stale_accepted", r.StaleAccepted), attribute.Int("dlock.torture.fence_regressions", r.FenceRegressions))
	if !r.OK() {
		span.SetStatus(codes.Error, "the checker found a violation")
	}
	return r, nil
}

// writeTimeline writes r's timeline into dir.
func writeTimeline(dir string, r torture.Result, sc torture.Scenario) error {
	return writeFile(filepath.Join(dir, torture.TimelineName(r)), func(w io.Writer) error {
		return torture.WriteTimeline(w, r, max(sc.Permits, 1), sc.Primitive == "rwmutex")
	})
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tableWidth is the width the results' tables fit.
const tableWidth = 100

// writeResults prints the results as two tables that fit tableWidth: what
// must hold (the safety figures and the verdict), then how the clients
// fared (loss notices, herds served, connections, errors), each with a
// legend of its short headers.
func writeResults(w io.Writer, results []torture.Result) {
	safety := textTable{head: []string{"SCENARIO", "MODE", "GRANTS", "OVERLAPS", "ACCEPTED", "REFUSED", "STALE", "REGRESS", "RESULT"}}
	clients := textTable{head: []string{"SCENARIO", "MODE", "LOSS (IN TIME)", "SERVED", "CONNS", "ERRORS"}}
	for _, r := range results {
		verdict := "ok"
		if !r.OK() {
			verdict = "FAIL"
		}
		served := "-"
		if r.Waiters > 0 {
			served = fmt.Sprintf("%d/%d", r.Waiters-r.Unserved, r.Waiters)
		}
		if r.Killed > 0 {
			served = fmt.Sprintf("%d after kill", r.Takeovers)
		}
		if r.Failovers > 0 {
			served = fmt.Sprintf("%d failovers", r.Failovers)
		}
		if r.ObserveStale {
			served = "OBSERVE STALE"
		}
		if r.Resurrected > 0 {
			served = fmt.Sprintf("%d RESURRECTED", r.Resurrected)
		}
		n := strconv.Itoa
		safety.rows = append(safety.rows, []string{r.Scenario, r.Mode, n(r.Grants), n(r.Overlaps), n(r.Accepted), n(r.StaleRejected), n(r.StaleAccepted), n(r.FenceRegressions), verdict})
		clients.rows = append(clients.rows, []string{r.Scenario, r.Mode, fmt.Sprintf("%d (%d)", r.LossNotices, r.LossOnTime), served, n(r.MaxConnections), errorList(r.Errors)})
	}
	safety.write(w, tableWidth)
	fmt.Fprint(w, wrap("REFUSED: stale writes the resource refused (a newer fence had written); STALE: writes accepted from an older grant after a newer one wrote, MUST BE 0; REGRESS: fence regressions, MUST BE 0.", tableWidth, "", ""))
	fmt.Fprintln(w)
	clients.write(w, tableWidth)
	fmt.Fprint(w, wrap("LOSS: holders told their lock was lost (in time: before the lease could have expired on the server); SERVED: a herd's waiters served, grants after a kill, or failovers; CONNS: the most client connections a master saw at once; ERRORS: failed attempts by kind.", tableWidth, "", ""))
}

// textTable is a header and rows of cells, printed in columns two spaces
// apart, as wide as their widest cell, except the last, whose words wrap
// onto lines of their own to fit a width.
type textTable struct {
	head []string
	rows [][]string
}

// write prints the table to fit width columns (unless a column before the
// last, or a word of the last, is too wide for it).
func (t textTable) write(w io.Writer, width int) {
	last := len(t.head) - 1
	widths := make([]int, last)
	for _, row := range append([][]string{t.head}, t.rows...) {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
	}
	room := width
	for _, n := range widths {
		room -= n + 2
	}
	for _, row := range append([][]string{t.head}, t.rows...) {
		lines := strings.Split(strings.TrimSuffix(wrap(row[last], room, "", ""), "\n"), "\n")
		for j, text := range lines {
			var b strings.Builder
			for i, n := range widths {
				cell := ""
				if j == 0 {
					cell = row[i]
				}
				b.WriteString(cell + strings.Repeat(" ", n+2-utf8.RuneCountInString(cell)))
			}
			fmt.Fprintln(w, strings.TrimRight(b.String()+text, " "))
		}
	}
}

func errorList(m map[string]int) string {
	var parts []string
	for _, k := range []string{"not_obtained", "timeout", "no_quorum", "node", "lease_expired", "replica_ack", "not_held", "other"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// workerMain is the client process of `dlock torture` (not for users).
func workerMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("torture-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg torture.WorkerConfig
	var nodes stringList
	fs.IntVar(&cfg.ID, "id", 0, "")
	fs.StringVar(&cfg.Resource, "resource", "", "")
	fs.StringVar(&cfg.Key, "key", "torture", "")
	fs.DurationVar(&cfg.TTL, "ttl", time.Second, "")
	fs.DurationVar(&cfg.Hold, "hold", 200*time.Millisecond, "")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "")
	fs.IntVar(&cfg.ReplicaAck, "replica-ack", 0, "")
	fs.IntVar(&cfg.Waiters, "waiters", 0, "")
	fs.StringVar(&cfg.Primitive, "primitive", "", "")
	fs.IntVar(&cfg.Permits, "permits", 0, "")
	fs.StringVar(&cfg.Topology, "topology", "", "")
	fs.Var(&nodes, "node", "")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg.Redis = nodes
	if endpoint := os.Getenv(otlpEnv); endpoint != "" {
		of := otlpFlag{endpoint: endpoint}
		tr, err := of.start("dlock-torture-client", stderr, attribute.Int("dlock.torture.client", cfg.ID))
		if err != nil {
			fmt.Fprintf(stderr, "dlock: torture worker: %v\n", err)
			return exitSoftware
		}
		cfg.Setup = func(c *dlock.Client) (context.Context, func()) {
			observe(c, nil, tr)
			return fromTraceparent(os.Getenv), tr.stop
		}
	}
	if err := torture.RunWorker(cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "dlock: torture worker: %v\n", err)
		return exitSoftware
	}
	return exitOK
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) Type() string       { return "strings" }
