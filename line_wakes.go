package dlock

import (
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// wakes is a Client's subscriptions to its keys' wake channels, one per key
// however many of its waiters wait there: a wake message ("id fence") goes
// to the waiter it names, and the subscription outlives the last waiter by
// watchLinger, so that goroutines taking turns on a key do not resubscribe
// each turn.
type wakes struct {
	mu   sync.Mutex
	keys map[string]*keyWakes
}

// keyWakes is one key's subscription and its waiters, by id. watch and
// ready are set once made is closed: the Watch is made, and cancelled,
// outside wakes.mu, which deliver takes on the subscriber's goroutine.
type keyWakes struct {
	made    chan struct{}
	watch   *transport.Watch
	ready   <-chan struct{}
	waiters map[string]chan int64
	linger  *time.Timer // ends the subscription once the last waiter has gone
}

// join adds waiter id on nm's key, whose wake messages go to ch (never
// blocking: a full ch drops one), and returns the subscription's ready.
func (ws *wakes) join(n *node, nm *lockNames, id string, ch chan int64) <-chan struct{} {
	ws.mu.Lock()
	kw := ws.keys[nm.key]
	fresh := kw == nil
	if fresh {
		if ws.keys == nil {
			ws.keys = map[string]*keyWakes{}
		}
		kw = &keyWakes{made: make(chan struct{}), waiters: map[string]chan int64{}}
		ws.keys[nm.key] = kw
	}
	if kw.linger != nil {
		kw.linger.Stop()
		kw.linger = nil
	}
	kw.waiters[id] = ch
	ws.mu.Unlock()
	if fresh {
		kw.watch, kw.ready = n.Watch(nm.wake, func(p string) { ws.deliver(nm.key, p) })
		close(kw.made)
	}
	<-kw.made
	return kw.ready
}

// leave removes waiter id from key's subscription.
func (ws *wakes) leave(key, id string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	kw := ws.keys[key]
	if kw == nil {
		return
	}
	delete(kw.waiters, id)
	if len(kw.waiters) == 0 && kw.linger == nil {
		kw.linger = time.AfterFunc(watchLinger, func() { ws.retire(key, kw) })
	}
}

// retire ends kw's subscription if no waiter came back meanwhile.
func (ws *wakes) retire(key string, kw *keyWakes) {
	ws.mu.Lock()
	gone := len(kw.waiters) == 0 && ws.keys[key] == kw
	if gone {
		delete(ws.keys, key)
	}
	ws.mu.Unlock()
	if gone {
		<-kw.made
		kw.watch.Cancel()
	}
}

// deliver hands a wake message to the waiter it names (on the subscriber's
// goroutine: it never blocks).
func (ws *wakes) deliver(key, payload string) {
	id, _, _ := strings.Cut(payload, " ")
	ws.mu.Lock()
	var ch chan int64
	if kw := ws.keys[key]; kw != nil {
		ch = kw.waiters[id]
	}
	ws.mu.Unlock()
	if fence, ok := wakeFor(id, payload); ok && ch != nil {
		select {
		case ch <- fence:
		default:
		}
	}
}
