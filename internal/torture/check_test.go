package torture

import (
	"testing"
	"time"
)

func TestCheckCountsWhatFencingMustPrevent(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	events := []Event{
		{Kind: "attempt", Client: 1, At: ms(0)},
		{Kind: "grant", Client: 1, Fence: 10, Sent: ms(0), Expiry: ms(1000), At: ms(1)},
		{Kind: "attempt", Client: 2, At: ms(5)},
		// Client 1 is paused past its lease; client 2 is granted meanwhile.
		{Kind: "grant", Client: 2, Fence: 11, Sent: ms(1100), At: ms(1101)},
		{Kind: "release", Client: 2, Fence: 11, At: ms(1200)},
		{Kind: "lost", Client: 1, Fence: 10, At: ms(1500)},
		// A regression: a later grant with a lower fence.
		{Kind: "grant", Client: 3, Fence: 9, Sent: ms(2000), At: ms(2001)},
		{Kind: "release", Client: 3, Fence: 9, At: ms(2100)},
	}
	writes := []Write{
		{Client: 2, Fence: 11, Grant: ms(1101), Accepted: true},
		{Client: 1, Fence: 10, Grant: ms(1), Accepted: false},   // the stale holder, refused
		{Client: 3, Fence: 9, Grant: ms(2001), Accepted: false}, // the regressed one, refused
		{Client: 2, Fence: 11, Grant: ms(1101), Accepted: true}, // the holder writes again
	}
	r := check(events, writes, ms(3000), 1, false)
	if r.Grants != 3 || r.Attempts != 2 {
		t.Errorf("grants %d attempts %d", r.Grants, r.Attempts)
	}
	if r.Overlaps != 1 {
		t.Errorf("overlaps = %d, want 1 (client 1 paused over client 2's grant)", r.Overlaps)
	}
	if r.FenceRegressions != 1 {
		t.Errorf("fence regressions = %d, want 1", r.FenceRegressions)
	}
	if r.StaleRejected != 2 || r.Accepted != 2 {
		t.Errorf("accepted %d, stale rejected %d", r.Accepted, r.StaleRejected)
	}
	if r.StaleAccepted != 0 {
		t.Errorf("stale accepted = %d, want 0", r.StaleAccepted)
	}
	if r.LossNotices != 1 || r.LossOnTime != 0 {
		t.Errorf("loss notices %d, in time %d; want 1, 0 (it came after the expiry)", r.LossNotices, r.LossOnTime)
	}
	if r.OK() {
		t.Error("a run with a fence regression passed")
	}

	// A client that stalls between reading its grant and reporting it
	// reports it late; that is no regression.
	stalled := []Event{
		{Kind: "grant", Client: 1, Fence: 10, Sent: ms(0), At: ms(900)}, // granted at ~1 ms, reported late
		{Kind: "grant", Client: 2, Fence: 11, Sent: ms(600), At: ms(601)},
		{Kind: "grant", Client: 3, Fence: 12, Sent: ms(1000), At: ms(1001)},
	}
	if r := check(stalled, nil, ms(3000), 1, false); r.FenceRegressions != 0 {
		t.Errorf("a late report counted as %d regressions", r.FenceRegressions)
	}

	// An older grant's write accepted after a newer grant's write: stale.
	stale := []Write{
		{Client: 2, Fence: 11, Grant: ms(1101), Accepted: true},
		{Client: 1, Fence: 12, Grant: ms(1), Accepted: true},
	}
	if r := check(nil, stale, ms(3000), 1, false); r.StaleAccepted != 1 || r.OK() {
		t.Errorf("stale accepted = %d, want 1", r.StaleAccepted)
	}
}

func TestProxyForwardsAndRedirects(t *testing.T) {
	r1, err := NewResource()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := NewResource()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	p, err := NewProxy(r1.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	logged := func(r *Resource) int {
		log, err := r.Log()
		if err != nil {
			t.Fatal(err)
		}
		return len(log)
	}
	w := newWriter(p.Addr())
	defer w.close()
	if refused, err := w.write(1, 5, 0); refused || err != nil || logged(r1) != 1 {
		t.Fatalf("through the proxy: refused %v, %v, %d logged", refused, err, logged(r1))
	}
	if refused, err := w.write(2, 4, 0); !refused || err != nil || logged(r1) != 1 {
		t.Fatalf("a lower fence: refused %v, %v, %d logged", refused, err, logged(r1))
	}
	p.SetTarget(r2.Addr())
	p.Cut()
	if refused, err := w.write(1, 5, 0); refused || err != nil || logged(r2) != 1 {
		t.Fatalf("after redirect: refused %v, %v, %d logged", refused, err, logged(r2))
	}
}

// For a semaphore, only a grant that begins while permits others hold is
// an overlap.
func TestSemaphoreOverlapsCountGrantsBeyondThePermits(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	grant := func(c int, at, end int64) []Event {
		return []Event{{Kind: "grant", Client: c, Fence: at, Sent: ms(at), At: ms(at), Expiry: ms(end)},
			{Kind: "release", Client: c, Fence: at, At: ms(end)}}
	}
	var events []Event
	events = append(events, grant(1, 100, 500)...)
	events = append(events, grant(2, 200, 600)...) // two at once: within 2 permits
	events = append(events, grant(3, 300, 700)...) // a third: beyond
	if r := check(events, nil, ms(3000), 2, false); r.Overlaps != 1 {
		t.Fatalf("overlaps %d, want 1", r.Overlaps)
	}
	if r := check(events, nil, ms(3000), 3, false); r.Overlaps != 0 {
		t.Fatalf("with 3 permits: overlaps %d, want 0", r.Overlaps)
	}
}

// For a read-write lock, readers' holds may overlap each other, not a
// writer's.
func TestReadersMayOverlapEachOtherNotAWriter(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	grant := func(c int, at, end int64) []Event {
		return []Event{{Kind: "grant", Client: c, Fence: at, Sent: ms(at), At: ms(at), Expiry: ms(end)},
			{Kind: "release", Client: c, Fence: at, At: ms(end)}}
	}
	var events []Event
	events = append(events, grant(1, 100, 500)...) // a reader
	events = append(events, grant(3, 200, 600)...) // another reader beside it
	events = append(events, grant(2, 550, 700)...) // a writer beside reader 3
	if r := check(events, nil, ms(3000), 1, true); r.Overlaps != 1 {
		t.Fatalf("overlaps %d, want 1", r.Overlaps)
	}
}

// A killed holder's hold ends at the kill; the run fails unless someone
// else is granted after it.
func TestAKilledHolderEndsItsHoldAndMustBeSucceeded(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	events := []Event{
		{Kind: "grant", Client: 1, Fence: 1, Sent: ms(100), At: ms(100), Expiry: ms(1100)},
		{Kind: "killed", Client: 1, At: ms(200)},
	}
	r := check(events, nil, ms(3000), 1, false)
	if r.Killed != 1 || r.Takeovers != 0 || r.OK() {
		t.Fatalf("nobody after the kill: %+v, OK %v", r, r.OK())
	}
	events = append(events, Event{Kind: "grant", Client: 2, Fence: 2, Sent: ms(300), At: ms(1200), Expiry: ms(2200)})
	r = check(events, nil, ms(3000), 1, false)
	if r.Takeovers != 1 || r.Overlaps != 0 || !r.OK() {
		t.Fatalf("a standby after the kill: %+v, OK %v", r, r.OK())
	}
}
