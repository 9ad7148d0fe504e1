// Package dlockotel traces and measures dlock's locks with OpenTelemetry.
//
//	in, err := dlockotel.New(dlockotel.Options{})
//	...
//	locks.SetTracer(in)
//	locks.SetObserver(in.Observe) // or dlock.Observers(promMetrics.Observe, in.Observe)
//
// Spans: one per acquisition (dlock.acquire, covering the wait), one per
// hold (dlock.hold, from the grant to Unlock or the loss, which it records
// as an event with its cause; Do runs its function under it), one per
// Unlock (dlock.release) and per renewal (dlock.renew). They nest under the
// span of the caller's context. Metrics: the Prometheus adapter's
// instruments, named after OpenTelemetry's conventions (see New).
//
// Lock keys are never attributes: there can be one per order, job or user,
// and they may say more than a trace should. Options.Classify may map keys
// to a small, fixed set of names, which become the dlock.lock attribute.
// Tokens are never recorded.
package dlockotel

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
)

// ScopeName is the instrumentation scope of dlockotel's tracer and meter.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// The attributes dlockotel records.
const (
	AttrLock      = attribute.Key("dlock.lock")           // the key as Options.Classify names it; absent from spans when ""
	AttrPrimitive = attribute.Key("dlock.primitive")      // lock, election, semaphore or rwmutex (dlock.Event.Primitive)
	AttrResult    = attribute.Key("dlock.result")         // dlock.Event.Outcome: obtained, contended, error; ok, not_held, token_mismatch
	AttrCause     = attribute.Key("dlock.cause")          // a loss's cause: token_gone, lease_expired, max_hold
	AttrContended = attribute.Key("dlock.contended")      // the acquisition found the lock held by someone else
	AttrFence     = attribute.Key("dlock.fence")          // the grant's fencing token
	AttrNodes     = attribute.Key("dlock.nodes")          // how many Redis nodes the Client asks
	AttrAnswered  = attribute.Key("dlock.nodes.answered") // which of them (indexes in dlock.New's order) answered the last attempt
)

// Options configures the instrumentation.
type Options struct {
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Classify maps a lock key to the dlock.lock attribute. It must return
	// few distinct values. Default: every key is "" (no name).
	Classify func(key string) string
	// Buckets are the wait and hold histograms' boundaries, in seconds.
	// Default: the Prometheus adapter's, 100 µs to about 100 s in factors
	// of 4.
	Buckets []float64
}

// Instrumentation is a dlock.Tracer and, through Observe, a dlock.Observer
// that records metrics.
type Instrumentation struct {
	tracer   trace.Tracer
	classify func(string) string

	acquires metric.Int64Counter
	wait     metric.Float64Histogram
	renewals metric.Int64Counter
	losses   metric.Int64Counter
	releases metric.Int64Counter
	hold     metric.Float64Histogram
}

var _ dlock.Tracer = (*Instrumentation)(nil)

// New returns the instrumentation. Its metrics are
//   - dlock.acquires (counter; dlock.lock, dlock.primitive, dlock.result),
//   - dlock.acquire.duration (histogram, s; the same attributes),
//   - dlock.renewals (counter; dlock.result: ok, not_held, error),
//   - dlock.losses (counter; dlock.cause),
//   - dlock.releases (counter; dlock.result: ok, token_mismatch, error),
//   - dlock.hold.duration (histogram, s; dlock.lock, dlock.primitive),
//
// each also with dlock.lock and dlock.primitive: the Prometheus adapter's
// dlock_acquires_total, dlock_acquire_wait_seconds and so on, with the same
// values.
func New(o Options) (*Instrumentation, error) {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Classify == nil {
		o.Classify = func(string) string { return "" }
	}
	if o.Buckets == nil {
		o.Buckets = []float64{0.0001, 0.0004, 0.0016, 0.0064, 0.0256, 0.1024, 0.4096, 1.6384, 6.5536, 26.2144, 104.8576}
	}
	m := o.MeterProvider.Meter(ScopeName)
	in := &Instrumentation{tracer: o.TracerProvider.Tracer(ScopeName), classify: o.Classify}
	var errs [6]error
	in.acquires, errs[0] = m.Int64Counter("dlock.acquires", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock acquisitions by result: obtained, contended (held by someone else, or the wait ended), error (Redis failed, or too few Redlock nodes answered)."))
	in.wait, errs[1] = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(o.Buckets...),
		metric.WithDescription("How long TryLock, Lock and Do took to obtain the lock or give up."))
	in.renewals, errs[2] = m.Int64Counter("dlock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals (watchdog or Extend) by result: ok, not_held, error."))
	in.losses, errs[3] = m.Int64Counter("dlock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Locks lost while held, by cause: token_gone, lease_expired, max_hold."))
	in.releases, errs[4] = m.Int64Counter("dlock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Unlocks by result: ok, token_mismatch (the lock had expired; perhaps someone else held it), error."))
	in.hold, errs[5] = m.Float64Histogram("dlock.hold.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(o.Buckets...),
		metric.WithDescription("How long locks were held, from the acquire request to Unlock."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return in, nil
}

// Instrument makes c report to in: it sets in as c's tracer, and c's
// observer to in.Observe followed by also (other observers, such as the
// Prometheus adapter's).
func (in *Instrumentation) Instrument(c *dlock.Client, also ...dlock.Observer) {
	c.SetTracer(in)
	c.SetObserver(dlock.Observers(append([]dlock.Observer{in.Observe}, also...)...))
}

// Observe records one event in the metrics. Pass it to
// dlock.Client.SetObserver, or to dlock.Observers beside other observers.
func (in *Instrumentation) Observe(e dlock.Event) {
	base := []attribute.KeyValue{AttrLock.String(in.classify(e.Key)), AttrPrimitive.String(e.Primitive)}
	ctx := context.Background()
	switch e.Kind {
	case dlock.EventAcquire:
		set := metric.WithAttributes(append(base, AttrResult.String(e.Outcome()))...)
		in.acquires.Add(ctx, 1, set)
		in.wait.Record(ctx, e.Wait.Seconds(), set)
	case dlock.EventRenew:
		in.renewals.Add(ctx, 1, metric.WithAttributes(append(base, AttrResult.String(e.Outcome()))...))
	case dlock.EventLost:
		in.losses.Add(ctx, 1, metric.WithAttributes(append(base, AttrCause.String(e.Outcome()))...))
	case dlock.EventRelease:
		in.releases.Add(ctx, 1, metric.WithAttributes(append(base, AttrResult.String(e.Outcome()))...))
		if e.Err == nil {
			in.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(base...))
		}
	}
}

// Start starts the span of one dlock operation; it is dlock.Tracer's
// method, called by the Client.
func (in *Instrumentation) Start(ctx context.Context, kind dlock.SpanKind, key, primitive string) (context.Context, func(dlock.Event)) {
	attrs := []attribute.KeyValue{AttrPrimitive.String(primitive)}
	if name := in.classify(key); name != "" {
		attrs = append(attrs, AttrLock.String(name))
	}
	ctx, span := in.tracer.Start(ctx, "dlock."+kind.String(), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(e dlock.Event) { end(span, kind, key, e) }
}

// end records e's outcome on span and ends it.
func end(span trace.Span, kind dlock.SpanKind, key string, e dlock.Event) {
	if e.Nodes > 0 {
		span.SetAttributes(AttrNodes.Int(e.Nodes))
	}
	if e.Fence > 0 {
		span.SetAttributes(AttrFence.Int64(e.Fence))
	}
	switch kind {
	case dlock.SpanAcquire:
		span.SetAttributes(AttrResult.String(e.Outcome()), AttrContended.Bool(e.Contended))
		if e.Answered != nil {
			span.SetAttributes(AttrAnswered.IntSlice(e.Answered))
		}
		if e.Outcome() == "error" {
			span.SetStatus(codes.Error, describe(e.Err, key))
		}
	case dlock.SpanHold:
		if e.Kind == dlock.EventLost {
			span.AddEvent("dlock.lost", trace.WithAttributes(AttrCause.String(e.Outcome()), attribute.String("exception.message", describe(e.Err, key))))
			span.SetStatus(codes.Error, "lock lost: "+e.Outcome())
		}
	case dlock.SpanRelease, dlock.SpanRenew:
		span.SetAttributes(AttrResult.String(e.Outcome()))
		if e.Err != nil {
			span.SetStatus(codes.Error, describe(e.Err, key))
		}
	}
	span.End()
}

// describe is err's message without the lock key (the key, not the
// classified name, may say more than a trace should). dlock's messages
// quote keys as Go does (%q), escapes included: each quoted occurrence
// becomes "<key>". A key of four bytes or more is also replaced where it
// stands unquoted (a shorter one would match inside words). dlock's
// messages never carry the token.
func describe(err error, key string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if key == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, strconv.Quote(key), `"<key>"`)
	if len(key) >= 4 {
		msg = strings.ReplaceAll(msg, key, "<key>")
	}
	return msg
}
