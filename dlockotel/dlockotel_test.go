package dlockotel_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
)

// setup returns a Client instrumented with the OTel SDK's in-memory span
// recorder and a manual metric reader, and the test's own tracer (for the
// caller's spans).
func setup(t *testing.T, classify func(string) string, rdbs ...*redis.Client) (*dlock.Client, *tracetest.SpanRecorder, *sdkmetric.ManualReader, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	in, err := dlockotel.New(dlockotel.Options{TracerProvider: tp, MeterProvider: mp, Classify: classify})
	if err != nil {
		t.Fatal(err)
	}
	c := dlock.New(rdbs...)
	t.Cleanup(func() { c.Close() })
	in.Instrument(c)
	return c, rec, reader, tp.Tracer("test")
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// noSecrets fails if any span's name, attributes, events or status holds
// the raw key or a token.
func noSecrets(t *testing.T, spans []sdktrace.ReadOnlySpan, key string, tokens ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name(), s.Status().Description}
		for _, a := range s.Attributes() {
			texts = append(texts, a.Value.Emit())
		}
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			for _, a := range e.Attributes {
				texts = append(texts, a.Value.Emit())
			}
		}
		// The key as dlock's messages quote it; unquoted too, unless it is
		// so short that it is found inside words.
		quoted := strconv.Quote(key)
		secrets := append([]string{quoted}, tokens...)
		if len(key) >= 4 {
			secrets = append(secrets, key, quoted[1:len(quoted)-1])
		}
		for _, txt := range texts {
			for _, secret := range secrets {
				if secret != "" && strings.Contains(txt, secret) {
					t.Errorf("span %s carries %q: %q", s.Name(), secret, txt)
				}
			}
		}
	}
}

func TestSpansNestUnderTheCallerAndTellTheOutcome(t *testing.T) {
	s := redistest.Start(t)
	c, rec, _, tracer := setup(t, nil, s.Client(t))
	const key = "order:4711:secret-customer"
	ctx, parent := tracer.Start(context.Background(), "request")

	l, err := c.TryLock(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	// A Lock that waits for the holder: contended, then obtained.
	got := make(chan *dlock.Lock)
	go func() {
		l2, err := c.Lock(ctx, key, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	time.Sleep(50 * time.Millisecond)
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()

	spans := rec.Ended()
	noSecrets(t, spans, key, l.Token(), l2.Token())
	acq := named(spans, "dlock.acquire")
	if len(acq) != 3 {
		t.Fatalf("%d acquire spans, want 3", len(acq))
	}
	results := map[string]int{}
	for _, sp := range acq {
		if sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("acquire span's parent is %v, want the caller's %v", sp.Parent().SpanID(), parent.SpanContext().SpanID())
		}
		r, _ := attr(sp, dlockotel.AttrResult)
		results[r.AsString()]++
		if n, _ := attr(sp, dlockotel.AttrNodes); n.AsInt64() != 1 {
			t.Errorf("nodes %v, want 1", n.AsInt64())
		}
		if a, _ := attr(sp, dlockotel.AttrAnswered); !slices.Equal(a.AsInt64Slice(), []int64{0}) {
			t.Errorf("answered %v, want [0]", a.AsInt64Slice())
		}
		if _, ok := attr(sp, dlockotel.AttrLock); ok {
			t.Error("dlock.lock set without Classify")
		}
		if p, _ := attr(sp, dlockotel.AttrPrimitive); p.AsString() != "lock" {
			t.Errorf("primitive %q", p.AsString())
		}
	}
	if results["obtained"] != 2 || results["contended"] != 1 {
		t.Errorf("acquire results %v, want 2 obtained and 1 contended", results)
	}
	for _, sp := range acq {
		r, _ := attr(sp, dlockotel.AttrResult)
		f, hasFence := attr(sp, dlockotel.AttrFence)
		if r.AsString() == "obtained" && (!hasFence || (f.AsInt64() != l.Fence() && f.AsInt64() != l2.Fence())) {
			t.Errorf("obtained span's fence %v, want %d or %d", f.AsInt64(), l.Fence(), l2.Fence())
		}
		if c, _ := attr(sp, dlockotel.AttrContended); r.AsString() == "contended" && !c.AsBool() {
			t.Error("contended span without dlock.contended")
		}
		if sp.Status().Code == codes.Error {
			t.Errorf("%s span has error status %q", r.AsString(), sp.Status().Description)
		}
	}
	// The waiting Lock's span covers its wait: it began before the first
	// holder's Unlock span and ended after it.
	rel := named(spans, "dlock.release")
	if len(rel) != 2 {
		t.Fatalf("%d release spans, want 2", len(rel))
	}
	waited := false
	for _, sp := range acq {
		if c, _ := attr(sp, dlockotel.AttrContended); c.AsBool() {
			if r, _ := attr(sp, dlockotel.AttrResult); r.AsString() == "obtained" {
				waited = sp.StartTime().Before(rel[0].StartTime()) && sp.EndTime().After(rel[0].StartTime())
			}
		}
	}
	if !waited {
		t.Error("no obtained, contended acquire span covers the holder's release")
	}
	holds := named(spans, "dlock.hold")
	if len(holds) != 2 {
		t.Fatalf("%d hold spans, want 2", len(holds))
	}
	for _, h := range holds {
		if h.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Error("hold span not under the caller's span")
		}
		if h.Status().Code == codes.Error || len(h.Events()) != 0 {
			t.Errorf("released hold has status %v, events %v", h.Status(), h.Events())
		}
	}
	renew := named(spans, "dlock.renew")
	if len(renew) != 1 {
		t.Fatalf("%d renew spans, want 1", len(renew))
	}
	if r, _ := attr(renew[0], dlockotel.AttrResult); r.AsString() != "ok" {
		t.Errorf("renew result %q", r.AsString())
	}
	for _, r := range rel {
		if res, _ := attr(r, dlockotel.AttrResult); res.AsString() != "ok" {
			t.Errorf("release result %q", res.AsString())
		}
	}
}

func TestDoRunsItsFunctionInsideTheHoldSpan(t *testing.T) {
	s := redistest.Start(t)
	c, rec, _, tracer := setup(t, func(k string) string { return strings.SplitN(k, ":", 2)[0] }, s.Client(t))
	ctx, parent := tracer.Start(context.Background(), "job")
	err := c.Do(ctx, "report:daily", func(ctx context.Context) error {
		_, work := tracer.Start(ctx, "work")
		time.Sleep(20 * time.Millisecond)
		work.End()
		return nil
	}, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := rec.Ended()
	holds, work := named(spans, "dlock.hold"), named(spans, "work")
	if len(holds) != 1 || len(work) != 1 {
		t.Fatalf("%d hold and %d work spans, want 1 each", len(holds), len(work))
	}
	h := holds[0]
	if work[0].Parent().SpanID() != h.SpanContext().SpanID() {
		t.Error("Do's function did not run inside the hold span")
	}
	if h.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Error("hold span not under the caller's span")
	}
	if h.EndTime().Sub(h.StartTime()) < 20*time.Millisecond {
		t.Errorf("hold span lasted %v, less than the function", h.EndTime().Sub(h.StartTime()))
	}
	if name, _ := attr(h, dlockotel.AttrLock); name.AsString() != "report" {
		t.Errorf("dlock.lock %q, want the classified name", name.AsString())
	}
	noSecrets(t, spans, "report:daily")
}

func TestALossIsAnEventOfTheHoldSpan(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	c, rec, reader, _ := setup(t, nil, rdb)
	ctx := context.Background()
	l, err := c.TryLock(ctx, "held-key", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "held-key") // the key is lost under the holder
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	spans := rec.Ended()
	holds := named(spans, "dlock.hold")
	if len(holds) != 1 {
		t.Fatalf("%d hold spans", len(holds))
	}
	h := holds[0]
	if h.Status().Code != codes.Error || len(h.Events()) != 1 || h.Events()[0].Name != "dlock.lost" {
		t.Fatalf("hold span status %v, events %v; want an error and one dlock.lost event", h.Status(), h.Events())
	}
	var cause string
	for _, a := range h.Events()[0].Attributes {
		if a.Key == dlockotel.AttrCause {
			cause = a.Value.AsString()
		}
	}
	if cause != "token_gone" {
		t.Errorf("loss cause %q, want token_gone", cause)
	}
	renew := named(spans, "dlock.renew")
	if r, _ := attr(renew[0], dlockotel.AttrResult); r.AsString() != "not_held" || renew[0].Status().Code != codes.Error {
		t.Errorf("renew result %q status %v", r.AsString(), renew[0].Status())
	}
	noSecrets(t, spans, "held-key", l.Token())

	m := collect(t, reader)
	if got := m.count("dlock.losses", "token_gone"); got != 1 {
		t.Errorf("dlock.losses{token_gone} = %d", got)
	}
	if got := m.count("dlock.renewals", "not_held"); got != 1 {
		t.Errorf("dlock.renewals{not_held} = %d", got)
	}
}

func TestRedlockSpansSayWhichNodesAnswered(t *testing.T) {
	var rdbs []*redis.Client
	var servers []*redistest.Server
	for i := 0; i < 3; i++ {
		s := redistest.Start(t)
		servers = append(servers, s)
		rdbs = append(rdbs, s.Client(t))
	}
	c, rec, _, _ := setup(t, nil, rdbs...)
	servers[1].Close() // one of three is down: a majority still grants
	l, err := c.TryLock(context.Background(), "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(context.Background())
	acq := named(rec.Ended(), "dlock.acquire")
	if len(acq) != 1 {
		t.Fatalf("%d acquire spans", len(acq))
	}
	if n, _ := attr(acq[0], dlockotel.AttrNodes); n.AsInt64() != 3 {
		t.Errorf("nodes %d, want 3", n.AsInt64())
	}
	if a, _ := attr(acq[0], dlockotel.AttrAnswered); !slices.Equal(a.AsInt64Slice(), []int64{0, 2}) {
		t.Errorf("answered %v, want [0 2]", a.AsInt64Slice())
	}
}

func TestMetricsFollowTheLifecycle(t *testing.T) {
	s := redistest.Start(t)
	c, _, reader, _ := setup(t, func(k string) string { return "order" }, s.Client(t))
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				if err := c.Do(ctx, "order:1", func(context.Context) error { return nil }, dlock.WithTTL(time.Second)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if _, err := c.TryLock(ctx, "order:2", dlock.WithTTL(dlock.MinTTL-1)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatal(err)
	}
	m := collect(t, reader)
	if got := m.count("dlock.acquires", "obtained"); got != 40 {
		t.Errorf("dlock.acquires{obtained} = %d, want 40", got)
	}
	if got := m.count("dlock.acquire.duration", "obtained"); got != 40 {
		t.Errorf("dlock.acquire.duration{obtained} count = %d, want 40", got)
	}
	if got := m.count("dlock.acquires", "error"); got != 1 {
		t.Errorf("dlock.acquires{error} = %d, want 1 (the bad TTL)", got)
	}
	if got := m.count("dlock.releases", "ok"); got != 40 {
		t.Errorf("dlock.releases{ok} = %d, want 40", got)
	}
	if got := m.count("dlock.hold.duration", ""); got != 40 {
		t.Errorf("dlock.hold.duration count = %d, want 40", got)
	}
	for _, name := range []string{"dlock.acquire.duration", "dlock.hold.duration"} {
		if m.units[name] != "s" {
			t.Errorf("%s unit %q, want s", name, m.units[name])
		}
	}
	for _, a := range m.attrs {
		if v, ok := a.Value(dlockotel.AttrLock); !ok || v.AsString() != "order" {
			t.Errorf("a data point without dlock.lock=order: %v", a.ToSlice())
		}
		if v, ok := a.Value(dlockotel.AttrPrimitive); !ok || v.AsString() != "lock" {
			t.Errorf("a data point without dlock.primitive=lock: %v", a.ToSlice())
		}
	}
}

// metrics is a collected ResourceMetrics, indexed for the tests.
type metrics struct {
	counts map[string]map[string]int64 // name -> result or cause ("" for none) -> count
	units  map[string]string
	attrs  []attribute.Set
}

func (m metrics) count(name, result string) int64 { return m.counts[name][result] }

func collect(t *testing.T, reader *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics{counts: map[string]map[string]int64{}, units: map[string]string{}}
	add := func(name string, set attribute.Set, n int64) {
		r, ok := set.Value(dlockotel.AttrResult)
		if !ok {
			r, _ = set.Value(dlockotel.AttrCause)
		}
		if m.counts[name] == nil {
			m.counts[name] = map[string]int64{}
		}
		m.counts[name][r.AsString()] += n
		m.attrs = append(m.attrs, set)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, met := range sm.Metrics {
			m.units[met.Name] = met.Unit
			switch d := met.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(met.Name, p.Attributes, p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(met.Name, p.Attributes, int64(p.Count))
				}
			default:
				t.Errorf("%s: unexpected data %T", met.Name, d)
			}
		}
	}
	return m
}

// A hold span ends even when the tracer is removed while the lock is held.
func TestTheHoldSpanEndsAfterTheTracerIsRemoved(t *testing.T) {
	s := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	in, err := dlockotel.New(dlockotel.Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	c := dlock.New(s.Client(t))
	defer c.Close()
	c.SetTracer(in) // no observer
	l, err := c.TryLock(context.Background(), "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c.SetTracer(nil)
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if started, ended := len(rec.Started()), len(rec.Ended()); started != 2 || ended != 2 {
		t.Fatalf("%d spans started, %d ended; want the acquire and the hold, both ended", started, ended)
	}
}

// Keys that dlock's messages quote with escapes stay out of spans too.
func TestKeysWithEscapesStayOutOfSpans(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	c, rec, _, _ := setup(t, nil, rdb)
	ctx := context.Background()
	keys := []string{`acct "bob" secret`, "tab\there", `back\slash`, "o", "\xff\xfe-bytes"}
	var tokens []string
	for _, k := range keys {
		l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, l.Token())
		rdb.Del(ctx, k)
		if err := l.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatal(err)
		}
		l.Unlock(ctx)
	}
	spans := rec.Ended()
	described := 0
	for _, sp := range spans {
		if strings.Contains(sp.Status().Description, "<key>") {
			described++
		}
		if strings.Contains(sp.Status().Description, "<key>ck") {
			t.Errorf("a short key was replaced inside words: %q", sp.Status().Description)
		}
	}
	if described == 0 {
		t.Error("no status names the key as <key>")
	}
	for i, k := range keys {
		noSecrets(t, spans, k, tokens[i])
	}
}

// A single node that does not answer is not contention: the acquire span
// says no node answered, and is not marked contended.
func TestANodeThatDoesNotAnswerIsNotContention(t *testing.T) {
	s := redistest.Start(t)
	c, rec, _, _ := setup(t, nil, s.Client(t))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.TryLock(cancelled, "k"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	s.Pause()
	defer s.Resume()
	for _, try := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.TryLock(ctx, "k"); return err },
		func(ctx context.Context) error { _, err := c.Lock(ctx, "k"); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		if err := try(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatal(err)
		}
		cancel()
	}
	acq := named(rec.Ended(), "dlock.acquire")
	if len(acq) != 3 {
		t.Fatalf("%d acquire spans, want 3", len(acq))
	}
	for i, sp := range acq {
		if a, ok := attr(sp, dlockotel.AttrAnswered); !ok || len(a.AsInt64Slice()) != 0 {
			t.Errorf("acquire %d: answered %v (set %v), want an empty list", i, a.AsInt64Slice(), ok)
		}
		if c, _ := attr(sp, dlockotel.AttrContended); c.AsBool() {
			t.Errorf("acquire %d marked contended though no node answered", i)
		}
	}
}
