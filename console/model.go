package console

import (
	"slices"
	"time"
)

// Row is what the page shows of one key. Holders are named by a token's
// redacted start (Status.Holder); no token is ever sent.
type Row struct {
	Key     string   `json:"key"`
	Kind    string   `json:"kind"`           // lock, election, semaphore, rwmutex (dlock.Status.Kind); "" while free
	Mode    string   `json:"mode,omitempty"` // an rwmutex's: read or write
	Held    bool     `json:"held"`
	TTL     int64    `json:"ttl_ms"` // the lease left when read (the longest hold's); -1: no expiry
	Fence   int64    `json:"fence"`
	Permits int      `json:"permits,omitempty"`
	Leader  string   `json:"leader,omitempty"`
	Holds   []Hold   `json:"holds"`
	Waiters []Waiter `json:"waiters"` // in line, first first
	History []Event  `json:"history"` // oldest first
	Error   string   `json:"error,omitempty"`
	At      int64    `json:"at"` // when read, Unix milliseconds
}

// Hold is one holder of a key.
type Hold struct {
	Holder string `json:"holder"`
	TTL    int64  `json:"ttl_ms"`
	Owner  *Owner `json:"owner,omitempty"`
}

// Owner is a hold's owner record (dlock.WithOwner).
type Owner struct {
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Program string `json:"program"`
	Label   string `json:"label,omitempty"`
	Since   int64  `json:"since"` // Unix milliseconds
}

// Waiter is one queued Lock call: the start of its id (never its token)
// and how long it has waited, by the server's clock.
type Waiter struct {
	ID     string `json:"id"`
	Waited int64  `json:"waited_ms"`
}

// Event is one step of a key's recent history, as the console saw it.
type Event struct {
	At     int64  `json:"at"`   // Unix milliseconds
	Kind   string `json:"kind"` // grant, hand-off, release, expiry, revoke
	Holder string `json:"holder"`
	Fence  int64  `json:"fence,omitempty"`
	Note   string `json:"note,omitempty"`
}

// historyLength is how many events a key keeps.
const historyLength = 50

// changes returns the events that lead from old to now (nil: the key was
// not shown), read at t; notified says a hand-off was announced.
func changes(old, now *Row, t time.Time) []Event {
	at := t.UnixMilli()
	var before, after []Hold
	if old != nil {
		before = old.Holds
	}
	if now != nil {
		after = now.Holds
	}
	has := func(hs []Hold, h string) bool {
		return slices.ContainsFunc(hs, func(x Hold) bool { return x.Holder == h })
	}
	var out []Event
	var gone []Hold
	for _, h := range before {
		if !has(after, h.Holder) {
			gone = append(gone, h)
		}
	}
	for _, h := range after {
		if has(before, h.Holder) {
			continue
		}
		e := Event{At: at, Kind: "grant", Holder: h.Holder, Fence: now.Fence}
		if len(gone) > 0 && len(after) == 1 { // one holder replaced another
			e.Kind, e.Note = "hand-off", "from "+gone[0].Holder
			gone = gone[1:]
		}
		out = append(out, e)
	}
	for _, h := range gone {
		kind := "release"
		if h.TTL >= 0 && old.At+h.TTL <= at+250 {
			kind = "expiry" // gone when its lease ran out, as far as the console can tell
		}
		out = append(out, Event{At: at, Kind: kind, Holder: h.Holder})
	}
	return out
}

// same reports whether the page would show a and b alike, but for the
// TTLs counting down (renewed says whether those moved).
func same(a, b *Row) bool {
	if a.Key != b.Key || a.Kind != b.Kind || a.Mode != b.Mode || a.Held != b.Held || a.Fence != b.Fence || a.Permits != b.Permits ||
		a.Leader != b.Leader || a.Error != b.Error || len(a.Holds) != len(b.Holds) ||
		!slices.Equal(waiterIDs(a), waiterIDs(b)) || len(a.History) != len(b.History) {
		return false
	}
	for i := range a.Holds {
		x, y := a.Holds[i], b.Holds[i]
		if x.Holder != y.Holder || (x.Owner == nil) != (y.Owner == nil) {
			return false
		}
	}
	return true
}

// renewed reports whether a lease of b ends over 250 ms away from where a
// said it would: a renewal, or a TTL the page's countdown no longer follows.
func renewed(a, b *Row) bool {
	if abs((a.At+a.TTL)-(b.At+b.TTL)) > 250 {
		return true
	}
	for i := range min(len(a.Holds), len(b.Holds)) {
		if abs((a.At+a.Holds[i].TTL)-(b.At+b.Holds[i].TTL)) > 250 {
			return true
		}
	}
	return false
}

func waiterIDs(r *Row) []string {
	ids := make([]string, len(r.Waiters))
	for i, w := range r.Waiters {
		ids[i] = w.ID
	}
	return ids
}

func abs(x int64) int64 { return max(x, -x) }
