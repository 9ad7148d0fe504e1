package dlock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A Redlock waiter learns that a lock was released through pub/sub: the
// release script publishes on the key's wake channel when it leaves the lock
// free, and the subscriber passes the message to every waiter of this
// Client that watches that key. (On one node, waiters queue instead:
// queue.go.)
//
// Notifications only make waiting prompt; they are never needed for
// progress. A waiter also retries on a jittered timer (see acquire.go), which
// covers what pub/sub cannot: a lock that expires instead of being released,
// a message lost while the subscription reconnects, a subscription that could
// not be made at all (e.g. an ACL without channel permissions).
//
// On a standalone server one connection carries every channel the Client
// watches. Redis Cluster serves a shard channel only from the node that owns
// its slot, so there each watched channel has its own sharded subscription
// (SSUBSCRIBE), shared by all waiters of that key.
type subscriber struct {
	n *node

	mu      sync.Mutex
	closed  bool
	shared  *redis.PubSub // standalone; nil until the first watch
	chans   map[string]*watched
	open    map[*redis.PubSub]struct{} // every PubSub not yet closed
	ctx     context.Context            // of the subscription commands; ended by close
	cancel  context.CancelFunc
	ops     []func()       // subscription changes not yet sent, in order
	sending bool           // a goroutine is sending ops
	loops   sync.WaitGroup // receive loops, one per PubSub, and the sender
}

// watched is one subscribed channel and the waiters interested in it.
type watched struct {
	waiters map[*waiter]struct{}
	ready   chan struct{} // closed once the server confirmed the subscription
	ps      *redis.PubSub // cluster: this channel's own subscription
	once    sync.Once     // closes ready
}

// waiter receives a value on c (buffered, never blocking the sender) each
// time the watched lock is released.
type waiter struct {
	channel string
	c       chan struct{}
}

func newSubscriber(n *node) *subscriber {
	s := &subscriber{n: n, chans: make(map[string]*watched), open: make(map[*redis.PubSub]struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// watch registers c to receive a value (without blocking the sender) each
// time key is released on this node. ready is closed once the server has
// confirmed the subscription: any release after that reaches c (unless the
// connection breaks). The caller must call unwatch.
func (s *subscriber) watch(key string, c chan struct{}) (w *waiter, ready <-chan struct{}, err error) {
	name := wakeChannel(key)
	w = &waiter{channel: name, c: c}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrClosed
	}
	ch := s.chans[name]
	if ch == nil {
		ch = &watched{waiters: make(map[*waiter]struct{}), ready: make(chan struct{})}
		s.chans[name] = ch
		s.subscribe(ch, name)
	}
	ch.waiters[w] = struct{}{}
	return w, ch.ready, nil
}

// subscribe starts the subscription of a new channel. Errors are not
// returned: a failed subscription only means the waiter relies on its timer.
// Called with s.mu held.
//
// Creating a PubSub without channels sends nothing, but subscribing may
// have to open a connection, which a slow or stopped server can hold up for
// the go-redis read timeout; so that no waiter waits for that (nor for
// s.mu), the command is sent in the background (send).
func (s *subscriber) subscribe(ch *watched, name string) {
	ctx := s.ctx
	// The receive loop starts after the PubSub's first subscription, which
	// opens its connection: in a cluster, to the node that serves name.
	loop := func(ps *redis.PubSub) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			s.startLoop(ps)
		}
	}
	if s.n.cluster {
		ps := s.n.rdb.SSubscribe(ctx)
		ch.ps = ps
		s.open[ps] = struct{}{}
		s.send(func() { _ = ps.SSubscribe(ctx, name); loop(ps) })
		return
	}
	first := s.shared == nil
	if first {
		s.shared = s.n.rdb.Subscribe(ctx)
		s.open[s.shared] = struct{}{}
	}
	ps := s.shared
	s.send(func() {
		_ = ps.Subscribe(ctx, name)
		if first {
			loop(ps)
		}
	})
}

// send queues fn, a subscription change, to be sent after those queued
// before it, by a goroutine that runs while there is something to send.
// Called with s.mu held, and not once s is closed.
func (s *subscriber) send(fn func()) {
	s.ops = append(s.ops, fn)
	if s.sending {
		return
	}
	s.sending = true
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		for {
			s.mu.Lock()
			if len(s.ops) == 0 || s.closed {
				s.ops, s.sending = nil, false
				s.mu.Unlock()
				return
			}
			fn := s.ops[0]
			s.ops = s.ops[1:]
			s.mu.Unlock()
			fn()
		}
	}()
}

// startLoop runs a goroutine that dispatches ps's messages until ps is
// closed. Called with s.mu held.
func (s *subscriber) startLoop(ps *redis.PubSub) {
	msgs := ps.ChannelWithSubscriptions()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		for m := range msgs {
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
					s.confirmed(m.Channel)
				}
			case *redis.Message:
				s.notify(m.Channel)
			}
		}
	}()
}

func (s *subscriber) confirmed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.chans[name]; ch != nil {
		ch.once.Do(func() { close(ch.ready) })
	}
}

func (s *subscriber) notify(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.chans[name]; ch != nil {
		for w := range ch.waiters {
			select {
			case w.c <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

// unwatch removes a waiter, and the channel's subscription with its last
// waiter.
func (s *subscriber) unwatch(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chans[w.channel]
	if ch == nil {
		return
	}
	delete(ch.waiters, w)
	if len(ch.waiters) > 0 {
		return
	}
	delete(s.chans, w.channel)
	if s.closed {
		return
	}
	if ps := ch.ps; ps != nil {
		s.send(func() {
			_ = ps.Close() // ends its loop
			s.mu.Lock()
			delete(s.open, ps)
			s.mu.Unlock()
		})
	} else if ps := s.shared; ps != nil {
		s.send(func() { _ = ps.Unsubscribe(s.ctx, w.channel) })
	}
}

// close ends every subscription and waits for the receive loops and the
// sender to stop. A PubSub that is still opening its connection is closed
// once that ends (bounded by the go-redis timeouts).
func (s *subscriber) close() {
	s.mu.Lock()
	s.closed = true
	s.cancel() // ends dialling
	var all []*redis.PubSub
	for ps := range s.open {
		all = append(all, ps)
	}
	s.mu.Unlock()
	for _, ps := range all {
		_ = ps.Close()
	}
	s.loops.Wait()
}
