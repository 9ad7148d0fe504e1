package console

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/doctor"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// view is the console's picture of Redis, kept current by run, and the
// pages that follow it.
type view struct {
	cfg  Config
	kick chan string // keys a notification named

	mu       sync.Mutex
	rows     map[string]*Row
	next     map[string]time.Time // when each row is read again
	ignored  map[string]time.Time // keys that are not locks, until then
	freed    map[string]time.Time // rows let go, shown free until then
	problems []string             // what the last scan could not read: the page says so
	cut      *Cut                 // the last scan's keys cut short at the Limit, or nil
	hist     map[string][]Event   // each key's recent history
	channels map[string]string    // wake and elect channels -> key
	renewals map[string]bool      // rows whose TTLs alone moved since the last "ttl" event
	findings []doctor.Finding
	notes    []string
	audit    []Audit
	subs     map[chan []byte]bool
	closed   bool
}

func newView(cfg Config) *view {
	return &view{cfg: cfg, kick: make(chan string, 1024), rows: map[string]*Row{}, next: map[string]time.Time{},
		ignored: map[string]time.Time{}, freed: map[string]time.Time{}, hist: map[string][]Event{}, channels: map[string]string{}, renewals: map[string]bool{}, subs: map[chan []byte]bool{}}
}

// doctorEvery is how often doctor's audit runs; keepFreed how long a key
// let go stays shown.
const (
	doctorEvery = 30 * time.Second
	keepFreed   = time.Minute
)

// run keeps the view current until ctx ends, then ends every page's stream.
func (v *view) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		v.mu.Lock()
		defer v.mu.Unlock()
		v.closed = true
		for ch := range v.subs {
			close(ch)
			delete(v.subs, ch)
		}
	}()
	for _, n := range v.cfg.Nodes {
		if _, cluster := n.(*redis.ClusterClient); !cluster {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v.listen(ctx, n)
			}()
		}
	}
	tick := time.NewTicker(v.cfg.Interval)
	defer tick.Stop()
	var doctored time.Time
	for {
		if time.Since(doctored) >= doctorEvery {
			doctored = time.Now()
			v.doctor(ctx)
		}
		v.scan(ctx)
		v.sendRenewals()
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case k := <-v.kick:
				v.refresh(ctx, k)
			case <-tick.C:
				waiting = false
			}
		}
	}
}

// listen turns dlock's notifications on n into reads of the keys they name.
func (v *view) listen(ctx context.Context, n redis.UniversalClient) {
	ps := n.PSubscribe(ctx, keyspace.WakePrefix+"*", keyspace.ElectPrefix+"*")
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, open := <-ch:
			if !open {
				return // the go-redis client was closed before the console
			}
			v.mu.Lock()
			k, ok := v.channels[m.Channel]
			v.mu.Unlock()
			if ok {
				select {
				case v.kick <- k:
				default: // the schedule reads it soon enough
				}
			}
		}
	}
}

// scan reads the keys that appeared or went since the last scan, and the
// rows that are due.
func (v *view) scan(ctx context.Context) {
	found, queued, problems, cut := v.discover(ctx)
	now := time.Now()
	v.mu.Lock()
	if !slices.Equal(problems, v.problems) { // set whole, once a scan is done: a page never sees half
		v.problems = problems
		v.broadcast("problems", problems)
	}
	if (cut == nil) != (v.cut == nil) || (cut != nil && *cut != *v.cut) {
		v.cut = cut
		v.broadcast("cut", cut)
	}
	var fresh, due []string
	for k := range found {
		if _, shown := v.rows[k]; !shown && now.After(v.ignored[k]) {
			fresh = append(fresh, k)
		}
	}
	for k := range v.ignored {
		if !found[k] {
			delete(v.ignored, k) // gone: a lock that takes the key again is new
		}
	}
	for k, at := range v.next {
		if !found[k] || now.After(at) || (queued[k] && len(v.rows[k].Waiters) == 0) {
			due = append(due, k)
		}
	}
	v.mu.Unlock()
	for _, k := range fresh {
		if !v.refresh(ctx, k) {
			v.mu.Lock()
			v.ignored[k] = now.Add(30 * time.Second) // not a lock: looked at again in a while
			v.mu.Unlock()
		}
	}
	for _, k := range due {
		v.refresh(ctx, k)
	}
	v.readAuditLog(ctx)
}

// Cut says that the keys shown are cut short at Config.Limit: Found keys
// of a lock's types match the pattern on the node with the most (not all of
// them need be locks), or at least Found when AtLeast (counting stops at
// ten times the Limit).
type Cut struct {
	Limit   int  `json:"limit"`
	Found   int  `json:"found"`
	AtLeast bool `json:"at_least"`
}

// discover scans every node: the keys matching the pattern, the keys with
// a wait queue (a first waiter publishes nothing), what could not be read,
// and whether the keys were cut short at the Limit (nil: not).
func (v *view) discover(ctx context.Context) (found, queued map[string]bool, problems []string, cut *Cut) {
	found, queued = map[string]bool{}, map[string]bool{}
	var all scanned
	keys := func(n redis.UniversalClient, pattern, typ string, count *scanned) []string {
		ks, err := v.keys(ctx, n, pattern, typ, count)
		if err != nil && !slices.Contains(problems, err.Error()) {
			problems = append(problems, err.Error())
		}
		return ks
	}
	for _, n := range v.cfg.Nodes {
		var node scanned // a Cluster's masters add up; Redlock's nodes each have every key
		for _, typ := range []string{"string", "zset"} {
			for _, k := range keys(n, v.cfg.Pattern, typ, &node) {
				found[k] = true
			}
		}
		all.cut, all.atLeast = all.cut || node.cut, all.atLeast || node.atLeast
		all.found = max(all.found, node.found)
		for _, q := range keys(n, keyspace.QueuePrefix+"*", "zset", nil) {
			if k, ok := keyspace.KeyOf(q, keyspace.QueuePrefix); ok {
				queued[k] = true
			}
		}
	}
	if all.cut {
		cut = &Cut{Limit: v.cfg.Limit, Found: all.found, AtLeast: all.atLeast}
	}
	return found, queued, problems, cut
}

// scanned counts the keys a scan found.
type scanned struct {
	found   int
	cut     bool // more than the Limit
	atLeast bool // counting stopped
}

// keys returns the keys of typ matching pattern on n (each master of a
// Cluster), at most the Limit from each; for a pattern of the user's, not
// dlock's own. Past the Limit it counts on (up to ten times the Limit)
// into count, if not nil, so that the page can say how many it leaves out.
func (v *view) keys(ctx context.Context, n redis.UniversalClient, pattern, typ string, count *scanned) ([]string, error) {
	var out []string
	own := strings.HasPrefix(pattern, "dlock:")
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.ScanType(ctx, 0, pattern, 1000, typ).Iterator()
		seen := 0
		for seen < v.cfg.Limit*10 && it.Next(ctx) {
			if !own && strings.HasPrefix(it.Val(), "dlock:") {
				continue
			}
			if seen++; seen <= v.cfg.Limit {
				out = append(out, it.Val())
			} else if count == nil {
				break
			}
		}
		if count != nil {
			count.found += seen
			count.cut = count.cut || seen > v.cfg.Limit
			count.atLeast = count.atLeast || (seen == v.cfg.Limit*10 && it.Next(ctx))
		}
		return it.Err()
	}
	err := eachMaster(ctx, n, scan)
	return out, err
}

// eachMaster calls fn for n, or for each master of a Cluster, one at a
// time; it returns the first error, naming the node.
func eachMaster(ctx context.Context, n redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	named := func(ctx context.Context, c *redis.Client) error {
		if err := fn(ctx, c); err != nil {
			return fmt.Errorf("%s: %w", c.Options().Addr, err) // an address, never a password
		}
		return nil
	}
	switch n := n.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		return n.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return named(ctx, c)
		})
	case *redis.Client:
		return named(ctx, n)
	}
	return nil
}

// refresh reads key again, records what changed in its history, and
// sends the change to the pages; it reports whether key is shown. A key
// let go stays shown, free, for a minute, so that its end can be seen.
func (v *view) refresh(ctx context.Context, key string) bool {
	row := v.read(ctx, key)
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.rows[key]
	if !row.Held && len(row.Waiters) == 0 && row.Error == "" {
		if old != nil && old.Held {
			v.freed[key] = now.Add(keepFreed)
		}
		if !now.Before(v.freed[key]) {
			row = nil
		}
	}
	if old != nil || row != nil {
		v.hist[key] = append(v.hist[key], changes(old, row, now)...)
		v.hist[key] = v.hist[key][max(0, len(v.hist[key])-historyLength):]
	}
	if row == nil {
		delete(v.next, key)
		delete(v.freed, key)
		delete(v.hist, key)
		delete(v.channels, keyspace.Wake(key))
		delete(v.channels, keyspace.Elect(key))
		delete(v.renewals, key)
		if old != nil {
			delete(v.rows, key)
			v.broadcast("gone", key)
		}
		return false
	}
	delete(v.ignored, key)
	row.History = append([]Event{}, v.hist[key]...)
	v.rows[key] = row
	v.channels[keyspace.Wake(key)], v.channels[keyspace.Elect(key)] = key, key
	every := time.Second // a key with waiters: a hand-off within one Client publishes nothing
	if row.TTL > 0 && len(row.Waiters) == 0 {
		every = min(max(time.Duration(row.TTL)*time.Millisecond/3, 250*time.Millisecond), 5*time.Second)
	}
	v.next[key] = now.Add(every)
	switch {
	case old == nil || !same(old, row):
		delete(v.renewals, key)
		v.broadcast("row", row)
	case renewed(old, row):
		v.renewals[key] = true // sent with the others once per Interval (sendRenewals)
	}
	return true
}

// sendRenewals sends the TTLs of the rows renewed since it last ran, as
// one "ttl" event: each key's TTL now. A renewal changes nothing else the
// page shows, and a page redraws nothing for it; with a thousand renewing
// holders, a row event each would be a thousand redraws a TTL.
func (v *view) sendRenewals() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.renewals) == 0 {
		return
	}
	now := time.Now().UnixMilli()
	ttls := make(map[string]int64, len(v.renewals))
	for k := range v.renewals {
		if r := v.rows[k]; r != nil {
			ttls[k] = r.TTL
			if r.TTL >= 0 {
				ttls[k] = max(r.TTL-(now-r.At), 0)
			}
		}
	}
	clear(v.renewals)
	v.broadcast("ttl", ttls)
}

// readAuditLog reads the audit stream; new revocations join their keys'
// histories.
func (v *view) readAuditLog(ctx context.Context) {
	entries := v.readAudit(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(entries) == 0 || (len(v.audit) > 0 && entries[0].ID == v.audit[0].ID) {
		return
	}
	for _, a := range slices.Backward(entries) {
		if a.Fields["event"] != "revoke" || slices.ContainsFunc(v.audit, func(b Audit) bool { return b.ID == a.ID }) {
			continue
		}
		k := a.Fields["key"]
		if row := v.rows[k]; row != nil {
			v.hist[k] = append(v.hist[k], Event{At: a.At, Kind: "revoke", Holder: a.Fields["holder"],
				Note: "by " + a.Fields["by"] + ": " + a.Fields["reason"]})
			row.History = append([]Event{}, v.hist[k]...)
			v.broadcast("row", row)
		}
	}
	v.audit = entries
	v.broadcast("audit", entries)
}

// doctor runs doctor's audit on every node.
func (v *view) doctor(ctx context.Context) {
	var all []doctor.Finding
	var notes []string
	check := func(ctx context.Context, c *redis.Client) error {
		fs, err := doctor.Audit(ctx, c, v.cfg.Pattern, v.cfg.Limit)
		if err != nil {
			notes = append(notes, c.Options().Addr+": "+err.Error())
		}
		f, note, _ := doctor.Eviction(ctx, c)
		if f != nil {
			fs = append(fs, *f)
		}
		if note != "" {
			notes = append(notes, note)
		}
		all = append(all, fs...)
		return nil
	}
	for _, n := range v.cfg.Nodes {
		_ = eachMaster(ctx, n, check)
	}
	if all == nil {
		all = []doctor.Finding{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.findings, v.notes = all, notes
	v.broadcast("doctor", map[string]any{"findings": all, "notes": notes})
}

// state is everything the page shows, as api/state and the first event
// of a stream send it.
type state struct {
	Rows     []*Row           `json:"rows"`
	Findings []doctor.Finding `json:"findings"`
	Notes    []string         `json:"notes"`
	Problems []string         `json:"problems"`
	Cut      *Cut             `json:"cut"` // null: every key matching is shown
	Audit    []Audit          `json:"audit"`
	Revoke   bool             `json:"revoke"`
	Auth     string           `json:"auth"`
	Pattern  string           `json:"pattern"`
	Nodes    []string         `json:"nodes"`
}

// snapshot returns the state; v.mu is held.
func (v *view) snapshot() state {
	st := state{Rows: []*Row{}, Findings: v.findings, Notes: v.notes, Problems: v.problems, Cut: v.cut, Audit: v.audit, Revoke: v.cfg.Revoke,
		Auth: v.cfg.Auth, Pattern: v.cfg.Pattern}
	for _, r := range v.rows {
		st.Rows = append(st.Rows, r)
	}
	slices.SortFunc(st.Rows, func(a, b *Row) int { return strings.Compare(a.Key, b.Key) })
	for _, n := range v.cfg.Nodes {
		switch n := n.(type) {
		case *redis.Client:
			st.Nodes = append(st.Nodes, n.Options().Addr) // never a password
		case *redis.ClusterClient:
			st.Nodes = append(st.Nodes, "cluster "+strings.Join(n.Options().Addrs, ","))
		}
	}
	return st
}

// state returns the state.
func (v *view) state() state {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.snapshot()
}

// subscribe returns a stream of events, the first of them the state; nil
// once the view is closed.
func (v *view) subscribe() chan []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil
	}
	ch := make(chan []byte, 256)
	ch <- event("state", v.snapshot())
	v.subs[ch] = true
	return ch
}

func (v *view) unsubscribe(ch chan []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.subs[ch] {
		delete(v.subs, ch)
		close(ch)
	}
}

// broadcast sends an event to every page; a page too slow to take it is
// dropped (its EventSource reconnects and starts from the state). v.mu
// is held.
func (v *view) broadcast(name string, data any) {
	msg := event(name, data)
	for ch := range v.subs {
		select {
		case ch <- msg:
		default:
			delete(v.subs, ch)
			close(ch)
		}
	}
}

// event formats a Server-Sent Event.
func event(name string, data any) []byte {
	b, _ := json.Marshal(data)
	return []byte("event: " + name + "\ndata: " + string(b) + "\n\n")
}
