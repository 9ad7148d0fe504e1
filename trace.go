package dlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// SpanKind says what a span started by a Tracer covers.
type SpanKind int

// The kinds of span.
const (
	// SpanAcquire: one acquisition call (TryLock, Lock, Do, and what is
	// built on them: Campaign, semaphores, read-write locks), its wait
	// included. It ends with the call's EventAcquire.
	SpanAcquire SpanKind = iota + 1
	// SpanHold: a granted lock, from the grant until Unlock (EventRelease)
	// or its loss (EventLost), whichever comes first. Do runs its function
	// under this span's context.
	SpanHold
	// SpanRelease: one Unlock call. It ends with its EventRelease.
	SpanRelease
	// SpanRenew: one renewal, the watchdog's or an Extend. It ends with
	// its EventRenew.
	SpanRenew
)

// String returns the kind's name: acquire, hold, release or renew.
func (k SpanKind) String() string {
	switch k {
	case SpanAcquire:
		return "acquire"
	case SpanHold:
		return "hold"
	case SpanRelease:
		return "release"
	case SpanRenew:
		return "renew"
	}
	return "unknown"
}

// A Tracer starts spans for dlock's operations; the dlockotel module has
// one for OpenTelemetry.
//
// Start is called as an operation begins, with the context it runs under:
// the caller's for acquisitions, Unlock and Extend (so spans nest under the
// caller's span), the acquisition's caller's for a hold, and the hold's for
// the watchdog's renewals. The context Start returns is the one the
// operation runs with: its Redis calls carry it (go-redis hooks see it),
// and Do runs its function under the hold's. dlock calls end exactly once,
// with the operation's Event (a hold ends with EventRelease or EventLost).
// Events given to end never carry the token. Start and end are called
// synchronously from the goroutine that does the work and must be quick;
// they may be called from several goroutines at once.
type Tracer interface {
	Start(ctx context.Context, kind SpanKind, key, primitive string) (context.Context, func(Event))
}

// SetTracer makes the Client start spans through t (nil: no spans).
// Without a tracer, it costs one atomic load per operation.
func (c *Client) SetTracer(t Tracer) {
	if t == nil {
		c.tracer.Store(nil)
		return
	}
	c.tracer.Store(&t)
}

// startSpan starts a span of kind through the Client's tracer. Without
// one it returns ctx and a nil end.
func (c *Client) startSpan(ctx context.Context, kind SpanKind, key, primitive string) (context.Context, func(Event)) {
	t := c.tracer.Load()
	if t == nil {
		return ctx, nil
	}
	return (*t).Start(ctx, kind, key, primitive)
}

// hold is a traced Lock's hold span: its context, and its end, called once.
type hold struct {
	ctx  context.Context
	once sync.Once
	end  func(Event)
}

// startHold starts l's hold span under ctx (the acquisition's caller's),
// if a tracer is set. The span ends at Unlock, or when the lease ends
// with ErrLost, whichever comes first.
func (c *Client) startHold(ctx context.Context, l *Lock) {
	if l == nil || c.tracer.Load() == nil {
		return
	}
	hctx, end := c.startSpan(ctx, SpanHold, l.Key(), primitiveOf(l.token))
	h := &hold{ctx: hctx, end: end}
	l.mu.Lock()
	l.hold = h
	l.mu.Unlock()
	context.AfterFunc(l.lease.watch().ctx, func() {
		if cause := context.Cause(l.lease.ctx); errors.Is(cause, ErrLost) {
			l.endHold(Event{Kind: EventLost, Key: l.Key(), Primitive: primitiveOf(l.token), Fence: l.fence, Nodes: len(c.nodes), Err: cause})
		}
	})
}

// traced returns l's hold span, or nil when l is not traced.
func (l *Lock) traced() *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold
}

// endHold ends l's hold span with e, once; nothing when l is not traced.
func (l *Lock) endHold(e Event) {
	if h := l.traced(); h != nil && h.end != nil {
		h.once.Do(func() { h.end(e) })
	}
}

// holdContext returns the hold span's context, or ctx when l is not
// traced.
func (l *Lock) holdContext(ctx context.Context) context.Context {
	if h := l.traced(); h != nil {
		return h.ctx
	}
	return ctx
}

// acquireNote records, for an acquisition's Event, which nodes answered
// its last attempt. It is made only when someone will read it (an
// observer or a tracer is set).
type acquireNote struct {
	answered atomic.Pointer[[]int]
}

// noteAnswers records which of answers (in node order) came in time
// with a reply from the server: a grant, a refusal, or an error reply.
func noteAnswers[T any](note *acquireNote, answers []answer[T]) {
	if note == nil {
		return
	}
	idx := make([]int, 0, len(answers))
	for i, a := range answers {
		if !a.abandoned && (a.err == nil || isReply(a.err)) {
			idx = append(idx, i)
		}
	}
	note.answered.Store(&idx)
}

// noteOne records the answer of a single node's step: it answered unless
// err says the server could not be reached or did not answer.
func noteOne(note *acquireNote, err error) {
	if note == nil {
		return
	}
	idx := []int{}
	if err == nil || isReply(err) || !errors.As(err, new(*NodeError)) {
		idx = []int{0}
	}
	note.answered.Store(&idx)
}

// isReply reports whether err is the server's reply (an error reply, or a
// script's), as opposed to a failure to reach it or a wait that ended.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, ErrWrongKind)
}

// Observers returns an Observer that passes each Event to every one of
// os, in order: several observers on one Client (Prometheus and
// OpenTelemetry together). Nil observers are skipped.
func Observers(os ...Observer) Observer {
	var all []Observer
	for _, o := range os {
		if o != nil {
			all = append(all, o)
		}
	}
	return func(e Event) {
		for _, o := range all {
			o(e)
		}
	}
}
