package dlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/tokens"
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
	// SpanHold: a granted lock, until Unlock (EventRelease) or its loss
	// (EventLost). Do runs its function under this span's context.
	SpanHold
	// SpanRelease: one Unlock call. It ends with its EventRelease.
	SpanRelease
	// SpanRenew: one renewal or Extend. It ends with its EventRenew.
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
// Start is called as an operation begins, from its goroutine, with the
// context it runs under: the caller's for acquisitions, Unlock and Extend,
// the acquisition's caller's for a hold, the hold's for renewals. The
// operation runs with the context Start returns (its Redis calls carry it;
// Do's function runs under the hold's). dlock calls end exactly once, with
// the operation's Event (never carrying the token), even if the tracer is
// replaced meanwhile, from the goroutine that finishes it (for a hold,
// perhaps another). Both must be quick, and safe to call concurrently.
type Tracer interface {
	Start(ctx context.Context, kind SpanKind, key, primitive string) (context.Context, func(Event))
}

// SetTracer makes the Client start spans through t (nil: none) for the
// operations that begin from now on; without hooks, one atomic load.
func (c *Client) SetTracer(t Tracer) { c.setHooks(func(h *hooks) { h.tracer = t }) }

// startSpan starts a span of kind through h's tracer (h: the hooks loaded
// for the operation). Without one it returns ctx and a nil end.
func (h *hooks) startSpan(ctx context.Context, kind SpanKind, key, primitive string) (context.Context, func(Event)) {
	if h == nil || h.tracer == nil {
		return ctx, nil
	}
	return h.tracer.Start(ctx, kind, key, primitive)
}

// startSpan starts a span of kind about l (see hooks.startSpan).
func (l *Lock) startSpan(h *hooks, ctx context.Context, kind SpanKind) (context.Context, func(Event)) {
	if h == nil || h.tracer == nil {
		return ctx, nil
	}
	return h.tracer.Start(ctx, kind, l.Key(), tokens.Primitive(l.token))
}

// hold is a traced Lock's hold span: its context, and its end, called once.
type hold struct {
	ctx  context.Context
	once sync.Once
	end  func(Event)
}

// startHold starts l's hold span under ctx (the acquisition's caller's)
// through h's tracer; it ends at Unlock, or at a loss (ErrLost).
func (c *Client) startHold(h *hooks, ctx context.Context, l *Lock) {
	if l == nil || h == nil || h.tracer == nil {
		return
	}
	hctx, end := l.startSpan(h, ctx, SpanHold)
	l.hold.Store(&hold{ctx: hctx, end: end})
	context.AfterFunc(l.lease.watch().ctx, func() { l.lost() })
}

// traced reports whether l has a hold span.
func (l *Lock) traced() bool { return l.hold.Load() != nil }

// endHold ends l's hold span with e, once; nothing when l is not traced.
func (l *Lock) endHold(e Event) {
	if h := l.hold.Load(); h != nil && h.end != nil {
		h.once.Do(func() { h.end(e) })
	}
}

// holdContext returns the hold span's context, or ctx if l is not traced.
func (l *Lock) holdContext(ctx context.Context) context.Context {
	if h := l.hold.Load(); h != nil {
		return h.ctx
	}
	return ctx
}

// acquireNote records which nodes answered an acquisition's last request
// (an attempt's, or a queue step's), made only when someone will read it.
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
		if !a.Abandoned && (a.Err == nil || isReply(a.Err)) {
			idx = append(idx, i)
		}
	}
	note.answered.Store(&idx)
}

// noteStep records a queue step's answer: none if the wait for it ended
// first (left) or err says the node could not be reached.
func noteStep(note *acquireNote, err error, left bool) {
	if note == nil {
		return
	}
	idx := []int{}
	if !left && (err == nil || isReply(err)) {
		idx = []int{0}
	}
	note.answered.Store(&idx)
}

// isReply reports whether err is the server's reply (an error reply, or a
// script's), as opposed to a failure to reach it or a wait that ended.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || errors.Is(err, ErrWrongKind) || errors.Is(err, ErrPermitMismatch)
}

// Observers returns an Observer that passes each Event to every one of
// os, in order: several observers on one Client (Prometheus and
// OpenTelemetry together). Nil observers are skipped; with none left, it
// returns nil (no observer, no cost).
func Observers(os ...Observer) Observer {
	var all []Observer
	for _, o := range os {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return func(e Event) {
		for _, o := range all {
			o(e)
		}
	}
}
