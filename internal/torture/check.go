package torture

import "sort"

// Result is one scenario's figures.
type Result struct {
	Scenario string  `json:"scenario"` // the scenario's name
	Mode     string  `json:"mode"`     // "single" or "redlock"
	Clients  int     `json:"clients"`  // client processes
	Seconds  float64 `json:"seconds"`  // how long the clients ran

	Attempts int            `json:"attempts"` // acquisitions tried
	Grants   int            `json:"grants"`   // acquisitions that obtained the lock
	Errors   map[string]int `json:"errors"`   // failed attempts by kind (not_obtained, no_quorum, node, …)

	// Overlaps counts pairs of grants to different clients whose holding
	// intervals (grant to release or loss notice) overlap in real time;
	// for a semaphore of N permits, the grants that began while N others
	// were held.
	Overlaps int `json:"overlaps"`
	// Accepted counts the writes the fenced resource accepted;
	// StaleRejected, those it refused because a newer fence had written.
	Accepted      int `json:"accepted"`
	StaleRejected int `json:"stale_rejected"`
	// StaleAccepted counts accepted writes made under a grant older than
	// the grant of a write the resource had already accepted: the one
	// thing fencing must prevent. Must be 0.
	StaleAccepted int `json:"stale_accepted"`
	// FenceRegressions counts grants whose fence is not above the fence
	// of every grant known to precede them (its reply read before their
	// request was sent). Must be 0.
	FenceRegressions int `json:"fence_regressions"`
	// LossNotices counts holders told their lock was lost; LossOnTime, those
	// told before the lease could have expired on the server.
	LossNotices int `json:"loss_notices"`
	LossOnTime  int `json:"loss_on_time"`
	// Killed counts the client processes the nemesis killed while they
	// held; Takeovers, the grants to other clients after such a kill
	// (must be at least 1 when Killed is: the others go on).
	Killed    int `json:"killed,omitempty"`
	Takeovers int `json:"takeovers,omitempty"`
	// Failovers counts the masters killed for a replica's promotion
	// (Sentinel and Cluster scenarios).
	Failovers int `json:"failovers,omitempty"`
	// Waiters counts a herd's waiters; Unserved, those that gave up
	// without ever obtaining the lock. Must be 0: every live waiter is
	// served.
	Waiters  int `json:"waiters,omitempty"`
	Unserved int `json:"unserved,omitempty"`
	// ObserveStale says that, in an election scenario, the harness's
	// Observe still reported another leader than Leader once the clients
	// had stopped (etcd #18163). Must be false.
	ObserveStale bool `json:"observe_stale,omitempty"`
	// Resurrected counts the released keys that a holder of the
	// "renewed" primitive found still, or again, holding its token after
	// its Unlock had released it (redisson #7272). Must be 0.
	Resurrected int `json:"resurrected,omitempty"`
	// MaxConnections is the most client connections any master saw at
	// once during the run.
	MaxConnections int `json:"max_connections"`

	// History is what the figures were computed from, for the timeline
	// (timeline.go); not part of the JSON report.
	History *History `json:"-"`
}

// History is a run's record: the clients' events, the resource's writes
// (accepted and refused) and the nemesis' faults, between Start and End
// (wall clock, ns). Lanes is the number of client processes, PerLane the
// client IDs per process (a herd's waiters).
type History struct {
	Start, End     int64
	Lanes, PerLane int
	Events         []Event
	Writes         []Write
	Faults         []Fault
}

// OK reports whether the hard assertions hold.
func (r Result) OK() bool {
	return r.StaleAccepted == 0 && r.FenceRegressions == 0 && r.Unserved == 0 && !r.ObserveStale && r.Resurrected == 0 &&
		(r.Killed == 0 || r.Takeovers > 0)
}

// check computes the Result; permits is a semaphore's (1 otherwise), and
// rw says that the odd clients are readers of a read-write lock, whose
// holds may overlap each other's but not a writer's.
func check(events []Event, writes []Write, end int64, permits int, rw bool) Result {
	r := Result{Errors: map[string]int{}}
	type hold struct {
		client              int
		fence               int64
		sent, expiry, start int64
		end                 int64
	}
	var holds []*hold
	open := map[int]*hold{}
	killed := map[int]bool{}
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	for _, e := range events {
		switch e.Kind {
		case "attempt":
			r.Attempts++
		case "served":
			r.Waiters++
		case "resurrected":
			r.Resurrected++
		case "unserved":
			r.Waiters++
			r.Unserved++
		case "error":
			r.Errors[e.Detail]++
		case "grant":
			r.Grants++
			if len(killed) > 0 && !killed[e.Client] {
				r.Takeovers++
			}
			h := &hold{client: e.Client, fence: e.Fence, sent: e.Sent, expiry: e.Expiry, start: e.At, end: end}
			holds = append(holds, h)
			open[e.Client] = h
		case "lost":
			r.LossNotices++
			if h := open[e.Client]; h != nil && h.fence == e.Fence {
				if e.At <= h.expiry {
					r.LossOnTime++
				}
				h.end = min(h.end, e.At)
			}
		case "killed":
			r.Killed++
			killed[e.Client] = true
			if h := open[e.Client]; h != nil {
				h.end = min(h.end, e.At)
			}
		case "release":
			// The hold stays on record: an Unlock that finds the lock
			// gone reports the loss just after the release began.
			if h := open[e.Client]; h != nil && h.fence == e.Fence {
				h.end = min(h.end, e.At)
			}
		}
	}
	// Overlaps: holds sorted by start; each overlaps the later ones that
	// start before it ends.
	sort.Slice(holds, func(i, j int) bool { return holds[i].start < holds[j].start })
	for i, a := range holds {
		if permits > 1 {
			// Holds of others still open when a began.
			others := 0
			for _, b := range holds[:i] {
				if b.end > a.start && b.client != a.client {
					others++
				}
			}
			if others >= permits {
				r.Overlaps++
			}
			continue
		}
		for _, b := range holds[i+1:] {
			if b.start >= a.end {
				break
			}
			if b.client != a.client && !(rw && reader(a.client) && reader(b.client)) {
				r.Overlaps++
			}
		}
	}
	// Fences must grow with the real-time order of grants. A client only
	// knows its grant happened between sending the request and reading
	// the reply (and a client process can stall in between), so a grant
	// is known to follow another only if its request was sent after the
	// other's reply came: only such pairs are compared.
	byReply := append([]*hold(nil), holds...) // holds is sorted by start (the reply)
	bySend := append([]*hold(nil), holds...)
	sort.Slice(bySend, func(i, j int) bool { return bySend[i].sent < bySend[j].sent })
	var maxFence int64
	next := 0
	for _, h := range bySend {
		for next < len(byReply) && byReply[next].start < h.sent {
			maxFence = max(maxFence, byReply[next].fence)
			next++
		}
		if h.fence <= maxFence {
			r.FenceRegressions++
		}
	}
	// Writes, in the order the resource decided them.
	var newestGrant int64
	for _, w := range writes {
		if !w.Accepted {
			r.StaleRejected++
			continue
		}
		r.Accepted++
		if w.Grant < newestGrant {
			r.StaleAccepted++
		}
		newestGrant = max(newestGrant, w.Grant)
	}
	return r
}
