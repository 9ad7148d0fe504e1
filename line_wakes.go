package dlock

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// wakes is a Client's waiters in line, by id, and its subscriptions to
// their keys' wake channels, one per key however many of its waiters wait
// there: a wake message ("id fence") goes to the waiter it names, and the
// subscription outlives the last waiter by watchLinger, so that goroutines
// taking turns on a key do not resubscribe each turn. A waiter is added
// before its first acquire, so that a handover (line_handover.go) finds it
// from then on; it subscribes once it waits.
type wakes struct {
	mu      sync.Mutex
	waiters map[string]waiterWakes
	keys    map[string]*keyWakes
	nkeys   atomic.Int32 // len(keys), read without mu (quiet: line_fast.go)
}

// waiterWakes is where a waiter's wakes go, and its key.
type waiterWakes struct {
	key string
	ch  chan wake
}

// wake is a wake message's fence, or, since set, a handover.
type wake struct {
	fence int64
	since time.Time // the send of the release that handed the key over
}

// keyWakes is one key's subscription. watch and ready are set once made is
// closed: the subscription is made, and stopped (which waits for its
// goroutine), outside wakes.mu, which deliver takes on that goroutine.
type keyWakes struct {
	made     chan struct{}
	watch    *watching
	ready    <-chan struct{}
	watching int         // the waiters subscribed
	linger   *time.Timer // ends the subscription once the last waiter has gone
}

// add names waiter id on key, whose wakes go to ch (never blocking: a full
// ch drops a wake message, or gives way to a handover).
func (ws *wakes) add(key, id string, ch chan wake) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.made()
	ws.waiters[id] = waiterWakes{key: key, ch: ch}
}

// made makes the maps, once (under mu).
func (ws *wakes) made() {
	if ws.waiters == nil {
		ws.waiters, ws.keys = map[string]waiterWakes{}, map[string]*keyWakes{}
	}
}

// join subscribes a waiter to nm's wake channel on n, a node of c's, and
// returns the subscription's ready.
func (ws *wakes) join(c *Client, n *node, nm *lockNames) <-chan struct{} {
	ws.mu.Lock()
	ws.made()
	kw := ws.keys[nm.key]
	fresh := kw == nil
	if fresh {
		kw = &keyWakes{made: make(chan struct{})}
		ws.keys[nm.key] = kw
		ws.nkeys.Add(1)
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.watching++
	ws.mu.Unlock()
	if fresh {
		kw.watch, kw.ready = c.watch(n, nm.wake, func(p string) { ws.deliver(nm.key, p) })
		close(kw.made)
	}
	<-kw.made
	return kw.ready
}

// leave removes waiter id, and its subscription to key if joined.
func (ws *wakes) leave(key, id string, joined bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.waiters, id)
	kw := ws.keys[key]
	if !joined || kw == nil {
		return
	}
	kw.watching--
	if kw.watching == 0 && kw.linger == nil {
		kw.linger = time.AfterFunc(watchLinger, func() { ws.retire(key, kw) })
	}
}

// retire ends kw's subscription if no waiter came back meanwhile.
func (ws *wakes) retire(key string, kw *keyWakes) {
	ws.mu.Lock()
	gone := kw.watching == 0 && ws.keys[key] == kw
	if gone {
		delete(ws.keys, key)
		ws.nkeys.Add(-1)
	}
	ws.mu.Unlock()
	if gone {
		<-kw.made
		kw.watch.stop()
	}
}

// deliver hands a wake message on key's channel to the waiter it names
// (on the subscription's goroutine).
func (ws *wakes) deliver(key, payload string) {
	id, _, _ := strings.Cut(payload, " ")
	if fence, ok := wakeFor(id, payload); ok {
		ws.send(key, id, wake{fence: fence})
	}
}

// send gives waiter id on key w, if it is still there, without blocking: a
// handover replaces a wake not yet taken (ws.mu makes the senders one at
// a time, so the slot it empties is its own).
func (ws *wakes) send(key, id string, w wake) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ww, ok := ws.waiters[id]
	if !ok || ww.key != key {
		return
	}
	ch := ww.ch
	select {
	case ch <- w:
		return
	default:
	}
	if w.since.IsZero() {
		return
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- w:
	default:
	}
}
