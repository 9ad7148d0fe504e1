package transport

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A node's subscriber carries every channel the Client watches and passes
// each message to the channel's watchers, on their channels (Watch.C). What the messages mean, and why
// waiting never depends on them, is the protocol's (dlock's queue.go).
//
// One goroutine (run) owns the subscriber's state: which channels are
// watched and by whom. Everything that touches the network runs beside it,
// so that a stalled server holds up neither the owner nor a waiter: one
// sender goroutine sends the subscription changes, in order; one receiver
// per PubSub forwards its messages to the owner. On a standalone server
// one connection carries every channel. Redis Cluster serves a shard
// channel only from the master that owns its slot, so there the Client
// keeps one sharded subscription (SSUBSCRIBE) per master it waits on, found
// when the channel is first watched (a slot that moves later costs its
// watchers their messages).
type subscriber struct {
	n     *Node
	start sync.Once

	ops    chan func(*subState) // requests to the owner
	msgs   chan any             // from the receivers: messages, subscriptions
	ctx    context.Context      // of the subscription commands; ended by close
	cancel context.CancelFunc
	done   chan struct{} // closed when the owner and its helpers have stopped
}

// subState is what the owner goroutine owns.
type subState struct {
	chans   map[string]*watched
	shared  *redis.PubSub   // standalone; nil until the first watch
	open    []*redis.PubSub // every PubSub made, closed at the end
	pending []func()        // subscription changes not yet handed to the sender
	helpers sync.WaitGroup  // the sender and the receivers
	// asked counts, by channel, the subscriptions asked for on the shared
	// connection whose confirmation has not come: only the last one's
	// confirms the channel's watchers (dispatch).
	asked map[string]int

	// Cluster: one PubSub per master, by address, and each channel's
	// master. Only the sender touches these (in the pending functions).
	shards  map[string]*redis.PubSub
	shardOf map[string]string
}

// watched is one subscribed channel and its watchers.
type watched struct {
	watchers  map[*Watch]struct{}
	ready     chan struct{} // closed once the server confirmed the subscription
	confirmed bool
}

// Watch is one watcher of a channel.
type Watch struct {
	// C receives each message's payload ("resubscribed" after the
	// connection was made again, when messages may have been lost). It
	// holds watchBuffer payloads: one that finds it full is dropped, so
	// that a slow watcher holds up neither the subscriber nor the other
	// watchers. C is closed when the watch is cancelled or the node stops
	// watching (after a payload still in it).
	C <-chan string

	s       *subscriber
	channel string
	c       chan string // C; closed by the owner goroutine only
}

// watchBuffer is how many payloads a watcher's channel holds: a watcher
// reads each at once, and a payload dropped only costs it a wake-up, which
// its fallback timer covers.
const watchBuffer = 64

// send gives w payload without blocking (dropped when w.C is full).
func (w *Watch) send(payload string) {
	select {
	case w.c <- payload:
	default:
	}
}

// resubscribed is the payload a watcher receives when its channel was
// subscribed again after the connection broke.
const resubscribed = "resubscribed"

func newSubscriber(n *Node) *subscriber {
	s := &subscriber{n: n, ops: make(chan func(*subState)), msgs: make(chan any, 64), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// do runs op on the owner goroutine and reports whether it ran (false once
// the subscriber is closed).
func (s *subscriber) do(op func(*subState)) bool {
	s.start.Do(func() { go s.run() })
	ran := make(chan struct{})
	select {
	case s.ops <- func(st *subState) { op(st); close(ran) }:
		<-ran
		return true
	case <-s.ctx.Done():
		return false
	}
}

// watch subscribes a new watcher to channel's messages. ready is closed
// once the server has confirmed the subscription: any message after that
// reaches w.C (unless the connection breaks). The caller must cancel the
// watch. Once the subscriber is closed, w.C is closed at once and ready
// never.
func (s *subscriber) watch(channel string) (w *Watch, ready <-chan struct{}) {
	c := make(chan string, watchBuffer)
	w = &Watch{C: c, s: s, channel: channel, c: c}
	never := make(chan struct{})
	ready = never
	ran := s.do(func(st *subState) {
		ch := st.chans[channel]
		if ch == nil {
			ch = &watched{watchers: map[*Watch]struct{}{}, ready: make(chan struct{})}
			st.chans[channel] = ch
			s.subscribe(st, ch, channel)
		}
		ch.watchers[w] = struct{}{}
		ready = ch.ready
	})
	if !ran {
		close(c)
	}
	return w, ready
}

// Cancel removes the watcher and closes its C, and ends the channel's
// subscription with its last watcher.
func (w *Watch) Cancel() {
	s := w.s
	s.do(func(st *subState) {
		ch := st.chans[w.channel]
		if ch == nil {
			return // cancelled already
		}
		if _, ok := ch.watchers[w]; !ok {
			return
		}
		delete(ch.watchers, w)
		close(w.c)
		if len(ch.watchers) > 0 {
			return
		}
		delete(st.chans, w.channel)
		if s.n.Cluster != nil {
			st.pending = append(st.pending, func() {
				if ps := st.shards[st.shardOf[w.channel]]; ps != nil {
					_ = ps.SUnsubscribe(s.ctx, w.channel)
				}
				delete(st.shardOf, w.channel)
			})
		} else if ps := st.shared; ps != nil {
			st.pending = append(st.pending, func() { _ = ps.Unsubscribe(s.ctx, w.channel) })
		}
	})
}

// subscribe queues the subscription of a new channel. Errors are not
// reported: a failed subscription only means the watchers rely on their
// fallbacks. Creating a PubSub without channels sends nothing; the first
// subscription opens its connection, after which its receiver starts.
func (s *subscriber) subscribe(st *subState, ch *watched, name string) {
	ctx := s.ctx
	receive := func(ps *redis.PubSub) {
		st.helpers.Add(1)
		go s.receive(ps, &st.helpers)
	}
	if cc := s.n.Cluster; cc != nil {
		st.pending = append(st.pending, func() {
			master, err := cc.MasterForKey(ctx, name)
			if err != nil {
				return
			}
			addr := master.Options().Addr
			st.shardOf[name] = addr
			ps, known := st.shards[addr]
			if !known {
				// Its first channel decides the node it connects to.
				ps = cc.SSubscribe(ctx)
				st.shards[addr] = ps
			}
			_ = ps.SSubscribe(ctx, name)
			if !known {
				receive(ps)
			}
		})
		return
	}
	st.asked[name]++ // (standalone: every SUBSCRIBE queued is sent, in order, on one connection)
	first := st.shared == nil
	if first {
		st.shared = s.n.RDB.Subscribe(ctx)
		st.open = append(st.open, st.shared)
	}
	ps := st.shared
	st.pending = append(st.pending, func() {
		_ = ps.Subscribe(ctx, name)
		if first {
			receive(ps)
		}
	})
}

// receive forwards ps's messages to the owner until ps is closed.
func (s *subscriber) receive(ps *redis.PubSub, wg *sync.WaitGroup) {
	defer wg.Done()
	for m := range ps.ChannelWithSubscriptions() {
		select {
		case s.msgs <- m:
		case <-s.ctx.Done():
			return
		}
	}
}

// run is the owner goroutine.
func (s *subscriber) run() {
	defer close(s.done)
	st := &subState{chans: map[string]*watched{}, shards: map[string]*redis.PubSub{}, shardOf: map[string]string{}, asked: map[string]int{}}
	io := make(chan func())
	st.helpers.Add(1)
	go st.runSender(s.ctx, io)
	defer func() {
		for _, ps := range st.open {
			_ = ps.Close()
		}
		st.helpers.Wait()
		for _, ch := range st.chans {
			for w := range ch.watchers {
				close(w.c)
			}
		}
	}()
	for {
		var send chan func()
		var next func()
		if len(st.pending) > 0 {
			send, next = io, st.pending[0]
		}
		select {
		case op := <-s.ops:
			op(st)
		case send <- next:
			st.pending = st.pending[1:]
		case m := <-s.msgs:
			s.dispatch(st, m)
		case <-s.ctx.Done():
			return
		}
	}
}

// runSender is the subscriber's sender: it runs the calls handed to it on io,
// one at a time, until ctx ends, and then closes the sharded
// subscriptions, which ends their receivers.
func (st *subState) runSender(ctx context.Context, io <-chan func()) {
	defer st.helpers.Done()
	defer func() {
		for _, ps := range st.shards {
			_ = ps.Close()
		}
	}()
	for {
		select {
		case fn := <-io:
			fn()
		case <-ctx.Done():
			return
		}
	}
}

// dispatch hands a message to its channel's watchers.
func (s *subscriber) dispatch(st *subState, m any) {
	switch m := m.(type) {
	case *redis.Subscription:
		if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
			return
		}
		// A watch cancelled before its subscription was confirmed, and one
		// made after it on the same channel, ask twice: the first reply
		// answers the cancelled one, whose UNSUBSCRIBE the server runs next,
		// and must not make the new one ready (found by review). Replies
		// come in order on the connection; one lost with a reconnect leaves
		// a ready that closes late or never, which the waits' timers cover.
		switch n := st.asked[m.Channel]; {
		case n > 1:
			st.asked[m.Channel] = n - 1
			return
		case n == 1:
			delete(st.asked, m.Channel)
		}
		if ch := st.chans[m.Channel]; ch != nil {
			if !ch.confirmed {
				ch.confirmed = true
				close(ch.ready)
				return
			}
			for w := range ch.watchers {
				w.send(resubscribed)
			}
		}
	case *redis.Message:
		if ch := st.chans[m.Channel]; ch != nil {
			for w := range ch.watchers {
				w.send(m.Payload)
			}
		}
	}
}

// close ends every subscription and waits for the owner and its helpers to
// stop. A PubSub that is still opening its connection is closed once that
// ends (bounded by the go-redis timeouts).
func (s *subscriber) close() {
	s.cancel() // ends dialling, and the owner
	started := true
	s.start.Do(func() { started = false })
	if started {
		<-s.done
	}
}
