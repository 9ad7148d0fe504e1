package wait

import (
	_ "embed"
	"time"
)

// The fast scripts: a mutex whose key was not contended lately (the
// driver's judgement, Config.Fast) is first tried with a script that
// declares three keys and does only the uncontended case, which a
// contended key sends on to the full script: an acquire takes a free key
// with no line (fast_acquire.lua), a release deletes its own key with no
// line behind it (fast_release.lua); anything else answers SLOW, and the
// full script follows. One script fewer per lock and unlock is not what
// they save (the full scripts do the same in one); the server's work per
// script is (docs/design.md, "The fast scripts"). A fast acquire is never
// a waiter's keepalive or a confirmation: it is only ever the first.
//
//	state      event                   commands                      next
//	Idle       Start, Fast             Run fast acquire              Acquiring
//	Acquiring  Reply SLOW              Run acquire                   Acquiring
//	Held       Unlock, Fast            Run fast release              Releasing
//	Releasing  Reply SLOW              Run release                   Releasing
//	Releasing  Failed (a fast release) Run release                   Releasing
//
// A fast release that failed is retried as a full one, as Unlock's
// retry does (lock.go).
var (
	FastAcquireScript = fence + fastAcquire // KEYS: the line's first three
	FastReleaseScript = fastRelease         // KEYS: the line's first and third
)

var (
	//go:embed scripts/fast_acquire.lua
	fastAcquire string
	//go:embed scripts/fast_release.lua
	fastRelease string
)

// fast reports whether the fast scripts are the waiter's to try: a
// mutex's (a shared token starts with ~), in a key not contended lately.
func (w *Waiter) fast() bool {
	return w.cfg.Fast && w.cfg.Token != "" && w.cfg.Token[0] != '~'
}

// start is the first acquire: the fast one if it may be.
func (w *Waiter) start(now time.Time) []Command {
	cmds := w.acquire(now)
	if w.fast() {
		cmds[0] = Command{Kind: RunFastAcquire, Args: w.acquireArgs[:3]}
	}
	return cmds
}

// unlock is the holder's release: the fast one if it may be.
func (w *Waiter) unlock() Command {
	if w.fast() {
		w.fastOut = true
		return Command{Kind: RunFastRelease, Args: w.releaseArgs[:1]}
	}
	return w.release()
}
