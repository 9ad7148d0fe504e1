package wait

import (
	"errors"
	"strconv"
	"strings"
)

// The handover: a release that hands the key to a waiter of the
// releaser's own Client sets the key's full TTL (at least the claim, so
// that a lost reply is confirmed in time) rather than a claim, takes
// the waiter out of the line, publishes nothing, and answers "id fence";
// the releaser's driver hands the waiter a Handed event, whose lease counts
// from the release's send (one Client, one clock). No confirming acquire:
// two scripts per hand-off instead of three (docs/design.md, "The
// handover"). A waiter that gave up meanwhile passes the key on with its
// leave, as it does a claim; one whose Handed is lost (the release's reply
// lost) finds the key its own at its next acquire, which confirms it.
//
//	state      event                   commands                      next
//	Queued     Handed, lease not over  Grant(fence, since+TTL)       Held
//	Queued     Handed, lease over      Run acquire                   Acquiring
//	Acquiring  Handed                  - (woken)                     Acquiring

// handed takes a handover in state Queued.
func (w *Waiter) handed(ev Event) []Command {
	since := ev.Since
	if w.cfg.Defects.LateLease {
		since = ev.Now
	}
	if !ev.Now.Before(w.lease(since)) {
		return w.acquire(ev.Now)
	}
	w.state = Held
	return w.cmd(Command{Kind: Grant, Fence: ev.Fence, Lease: w.lease(since)})
}

// parseHandover parses a release's "id fence".
func parseHandover(s string) (Result, error) {
	id, f, _ := strings.Cut(s, " ")
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil || fence <= 0 || id == "" {
		return Result{}, errors.New("wait: bad handover " + strconv.Quote(s))
	}
	return Result{Status: Released, Next: id, Fence: fence}, nil
}
