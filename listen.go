package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/listen"
	"github.com/dlock-go/dlock/internal/transport"
)

// The listening wait: Lock with Redlock, which does not queue (each node
// would order its waiters on its own). Its decisions are internal/listen's
// Line, one per Client and key with waiters; this file is its driver: the
// callers' goroutines, the subscriptions, the timers and the attempts.

// notifyWindow is how long a listening waiter's failed attempt keeps the
// notify key alive; the release publishes only while it exists, so a
// release nobody listens for costs no PUBLISH. A waiter retries at least
// every maxRetryWait, renewing it; if it lapses, the timer still retries.
const notifyWindow = 3 * maxRetryWait

// notifyMillis is notifyWindow as the acquire script takes it (boxed once).
var notifyMillis any = notifyWindow.Milliseconds()

// A listening wait is woken by release messages, backed by a jittered timer
// (listen.Delay); elections and renewals retry on the same bounds.
const (
	minRetryWait = listen.MinWait
	maxRetryWait = listen.MaxWait
)

// retryDelay returns a jittered wait in [wait/2, wait], or just past the
// holder's TTL if sooner (a lock that expires publishes nothing).
func retryDelay(wait, holderTTL time.Duration) time.Duration {
	return listen.Delay(wait, holderTTL, rand.Uint64())
}

// listens is a Client's listening lines, one per key with waiters, and the
// keys with a first attempt under way (first).
type listens struct {
	nodes []*node

	mu     sync.Mutex
	lines  map[string]*listenLine
	n      atomic.Int32    // len(lines), read without mu (freed)
	trying map[string]bool // the keys with a first attempt under way (first)
	ids    listen.ID
}

// listenLine is a Line and what its driver keeps beside it.
type listenLine struct {
	m       *listen.Line
	key     string
	waiters map[listen.ID]*listener
	watches []*transport.Watch
	readers sync.WaitGroup // one goroutine per watch (read)
	gone    bool           // the line ended (Unsubscribe): its readers' events are dropped
}

// listener is one waiting call: the commands for it, and a note that some
// came.
type listener struct {
	id   listen.ID
	cmds []listen.Command
	note chan struct{} // one slot
}

// first reports whether a listening Lock call may make its first attempt
// on key: no other call of the Client's is making one (until firstDone).
// Else it goes to the line without one, which would find the key alike and
// fail: a herd's attempts queued the first holder's Unlock behind them.
// Waiters already in line do not stop it: a release may let it through.
func (ls *listens) first(key string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.trying[key] {
		return false
	}
	if ls.trying == nil {
		ls.trying = map[string]bool{}
	}
	ls.trying[key] = true
	return true
}

// firstDone ends the first attempt that first allowed.
func (ls *listens) firstDone(key string) {
	ls.mu.Lock()
	delete(ls.trying, key)
	ls.mu.Unlock()
}

// enter puts a new call in key's line and returns it, its line, and the
// commands for it.
func (ls *listens) enter(key string) (*listener, *listenLine, []listen.Command) {
	ls.mu.Lock()
	defer ls.mu.Unlock() // a line in ls.lines has not ended: the Enter is stepped before it can
	ln := ls.lines[key]
	if ln == nil {
		ln = &listenLine{m: listen.New(len(ls.nodes)), key: key, waiters: map[listen.ID]*listener{}}
		if ls.lines == nil {
			ls.lines = map[string]*listenLine{}
		}
		ls.lines[key] = ln
		ls.n.Add(1)
	}
	ls.ids++
	me := &listener{id: ls.ids, note: make(chan struct{}, 1)}
	ln.waiters[me.id] = me
	mine, _ := ls.stepLocked(ln, me, listen.Event{Kind: listen.Enter, ID: me.id})
	return me, ln, mine
}

// freed tells key's line that the Client's holder released it.
func (ls *listens) freed(key string) {
	if ls.n.Load() == 0 { // no line: every Unlock of a Client without waiters
		return
	}
	ls.mu.Lock()
	ln := ls.lines[key]
	ls.mu.Unlock()
	if ln != nil {
		ls.step(ln, nil, listen.Event{Kind: listen.Freed})
	}
}

// step feeds ev to ln's Line, carries out its commands, and returns those
// for me, whose goroutine carries them out; the others' go to their
// waiters.
func (ls *listens) step(ln *listenLine, me *listener, ev listen.Event) []listen.Command {
	ls.mu.Lock()
	mine, ended := ls.stepLocked(ln, me, ev)
	ls.mu.Unlock()
	if ended { // outside mu: the readers may be waiting for it
		for _, w := range ln.watches {
			w.Cancel()
		}
		ln.readers.Wait()
	}
	return mine
}

// stepLocked is step with ls.mu held, stamping ev with the time and random
// bits; ended reports that the line ended, and its watches are to be
// cancelled (outside mu).
func (ls *listens) stepLocked(ln *listenLine, me *listener, ev listen.Event) (mine []listen.Command, ended bool) {
	if ln.gone {
		return nil, false
	}
	ev.Now, ev.Rand = time.Now(), rand.Uint64()
	for _, cmd := range ln.m.Step(ev) {
		switch w := ln.waiters[cmd.ID]; {
		case cmd.Kind == listen.Subscribe:
			ls.subscribe(ln)
		case cmd.Kind == listen.Unsubscribe:
			ln.gone, ended = true, true
			delete(ls.lines, ln.key)
			ls.n.Add(-1)
		case w == me:
			mine = append(mine, cmd)
		case w != nil:
			w.cmds = append(w.cmds, cmd)
			select {
			case w.note <- struct{}{}:
			default: // a note is pending
			}
		}
	}
	if ev.Kind == listen.Leave || (len(mine) > 0 && mine[len(mine)-1].Kind == listen.Return) {
		delete(ln.waiters, ev.ID)
	}
	return mine, ended
}

// take returns the commands that came for me.
func (ls *listens) take(me *listener) []listen.Command {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	cmds := me.cmds
	me.cmds = nil
	return cmds
}

// subscribe watches ln's key's wake channel on every node (ls.mu held).
func (ls *listens) subscribe(ln *listenLine) {
	for i, n := range ls.nodes {
		w, ready := n.Watch(keyspace.Wake(ln.key))
		ln.watches = append(ln.watches, w)
		ln.readers.Add(1)
		go ls.read(ln, i, w, ready)
	}
}

// read reports node i's confirmation of ln's subscription, and its release
// messages, until the watch is cancelled.
func (ls *listens) read(ln *listenLine, i int, w *transport.Watch, ready <-chan struct{}) {
	defer ln.readers.Done()
	for {
		select {
		case <-ready:
			ready = nil
			ls.step(ln, nil, listen.Event{Kind: listen.Ready, Node: i})
		case p, ok := <-w.C:
			if !ok {
				return
			}
			if p == "released" {
				ls.step(ln, nil, listen.Event{Kind: listen.Released, Node: i})
			}
		}
	}
}

// waitListening is Lock's wait with Redlock, after a first attempt that
// failed with err, or none (err nil: listens.first): in its line, it tries
// when the Line says, until it obtains the lock, fails for good, or stops
// waiting (its context's end, or Close).
func (c *Client) waitListening(ctx context.Context, key string, o options, err error, contended *bool) (*Lock, error) {
	last := err // the last attempt's error
	slow := slowNodes{c: c, key: key}
	slow.note(err)
	me, ln, work := c.listens.enter(key)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var l *Lock
	var final error
	for {
		for len(work) > 0 {
			cmd := work[0]
			work = work[1:]
			switch cmd.Kind {
			case listen.Timer:
				timer.Reset(time.Until(cmd.At))
			case listen.Return:
				return l, final
			case listen.Attempt:
				var ev listen.Event
				l, ev, final = c.attemptListening(ctx, key, o, &last, contended, &slow)
				ev.ID = me.id
				work = append(work, c.listens.step(ln, me, ev)...)
			}
		}
		var stop error
		if work, stop = c.awaitListening(ctx, me, ln, timer); stop != nil {
			return nil, gaveUp(stop, last)
		}
	}
}

// awaitListening waits for the next commands for me: a note that some
// came, or its timer's Tick. If ctx ends or the Client closes first, me
// leaves the line (no attempt is under way: nothing is held) and stop says
// why.
func (c *Client) awaitListening(ctx context.Context, me *listener, ln *listenLine, timer *time.Timer) (work []listen.Command, stop error) {
	select {
	case <-me.note:
		work = c.listens.take(me)
	case <-timer.C:
		work = c.listens.step(ln, me, listen.Event{Kind: listen.Tick})
	case <-ctx.Done():
	case <-c.done:
	}
	if stop = c.stopped(ctx); stop != nil {
		c.listens.step(ln, me, listen.Event{Kind: listen.Leave, ID: me.id})
		return nil, stop
	}
	return work, nil
}

// attemptListening tries once and returns the lock, or the attempt's
// outcome for the Line and the call's error should it return now.
func (c *Client) attemptListening(ctx context.Context, key string, o options, last *error, contended *bool, slow *slowNodes) (*Lock, listen.Event, error) {
	ev := listen.Event{Kind: listen.Result, Outcome: listen.Taken}
	l, pttl, err := c.try(ctx, key, o, true)
	switch {
	case err == nil:
		ev.Outcome, ev.Until = listen.Granted, l.lease.validUntil()
		return l, ev, nil
	case ctx.Err() != nil:
		ev.Outcome = listen.Final
		return nil, ev, gaveUp(ctx.Err(), *last)
	case !c.mayWait(ctx, o, err):
		ev.Outcome = listen.Final
		return nil, ev, c.unwaited(ctx, o, err)
	case errors.Is(err, errSplit):
		ev.Outcome = listen.Split
	}
	ev.PTTL = pttl
	*contended = *contended || isContended(ctx, err)
	slow.note(err)
	*last = err
	return nil, ev, nil
}

// slowNodes warns, once per Lock call, that it waits for a majority of
// nodes to answer: a Lock without a deadline would otherwise wait silently.
type slowNodes struct {
	c      *Client
	key    string
	warned bool
}

func (s *slowNodes) note(err error) {
	if !s.warned && errors.Is(err, ErrNoQuorum) {
		s.warned = true
		s.c.warn("dlock: Lock is waiting for a majority of nodes to answer",
			slog.String("key", s.key), slog.Any("err", err))
	}
}

// errSplit marks a Redlock attempt that some nodes granted while a
// majority was taken: another waiter tried at the same moment.
var (
	errSplit            = errors.New("the nodes were split between waiters")
	errNotObtainedSplit = fmt.Errorf("%w (%w)", ErrNotObtained, errSplit)
)

// gaveUp is Lock's error when it stops waiting for cause (an ended context,
// ErrClosed): it matches ErrNotObtained and cause, and, when the last
// attempt failed for want of a majority or a reachable node, rather than
// contention, that attempt's *QuorumError or *NodeError too.
func gaveUp(cause, last error) error {
	if errors.Is(last, ErrNoQuorum) || transient(last) {
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, cause, last)
	}
	return notObtained(cause)
}
