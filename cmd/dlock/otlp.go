package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	dlockprom "github.com/dlock-go/dlock/prometheus"
)

// otlpEnv passes the endpoint to torture's client processes (in the
// environment, not on their command line, where ps would show a password).
const otlpEnv = "DLOCK_OTLP_ENDPOINT"

// otlpFlag is --otlp-endpoint: where to export OpenTelemetry traces, over
// OTLP/HTTP. Off when empty.
type otlpFlag struct{ endpoint string }

func (f *otlpFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "export OpenTelemetry traces over OTLP/HTTP to `URL` (e.g. http://127.0.0.1:4318; path default /v1/traces; off by default)")
}

// tracing is a running trace export: its provider, and the
// instrumentation of dlock Clients through it.
type tracing struct {
	tp     *sdktrace.TracerProvider
	in     *dlockotel.Instrumentation
	errs   *exportErrors
	stderr io.Writer
}

// start begins the export, if asked for (nil, nil when not), with spans
// from service (the OpenTelemetry service.name) and attrs on every span's
// resource.
func (f *otlpFlag) start(service string, stderr io.Writer, attrs ...attribute.KeyValue) (*tracing, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	opts, err := otlpOptions(f.endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %q: %s", shown(f.endpoint), scrubOTLP(err, f.endpoint))
	}
	res := resource.NewSchemaless(append([]attribute.KeyValue{attribute.String("service.name", service)}, attrs...)...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res))
	errs := &exportErrors{endpoint: f.endpoint, stderr: stderr}
	otel.SetErrorHandler(errs)
	in, err := dlockotel.New(dlockotel.Options{TracerProvider: tp})
	if err != nil {
		tp.Shutdown(context.Background())
		return nil, err
	}
	return &tracing{tp: tp, in: in, errs: errs, stderr: stderr}, nil
}

// command sets up what run and elect report to: the export (when asked
// for), c observed by it and by metrics (nil: none), and the command's own
// span, name. It returns the context to work under, the tracing (nil when
// off) and what to run at the end: end the span, flush the export.
func (f *otlpFlag) command(c *dlock.Client, metrics *dlockprom.Metrics, name string, stderr io.Writer) (context.Context, *tracing, func(), error) {
	tr, err := f.start("dlock", stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	observe(c, metrics, tr)
	ctx, span := tr.span(context.Background(), name)
	return ctx, tr, func() { span.End(); tr.stop() }, nil
}

// otlpOptions turns an endpoint URL into the exporter's options: http or
// https, a host, the path (default /v1/traces), and the URL's user and
// password, if any, as basic authentication. Errors show the URL masked.
func otlpOptions(endpoint string) ([]otlptracehttp.Option, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		// Say what is wrong from the masked URL, which holds no password
		// for the parser's message to quote (as parseRedisURL does).
		why := "its user name or password does not parse"
		if _, merr := url.Parse(masked(endpoint)); merr != nil {
			var ue *url.Error
			if errors.As(merr, &ue) {
				merr = ue.Err // the url package quotes the whole URL
			}
			why = merr.Error()
		}
		return nil, fmt.Errorf("--otlp-endpoint %q: %s", shown(endpoint), why)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp-endpoint %q: want http://HOST:PORT or https://HOST:PORT (OTLP over HTTP)", shown(endpoint))
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(endpoint, "?#") {
		return nil, fmt.Errorf("--otlp-endpoint %q: a query or fragment would not be sent (OTLP/HTTP posts to the path); give the URL without it", shown(endpoint))
	}
	path := u.Path
	if path == "" || path == "/" {
		path = "/v1/traces"
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path)}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	if u.User != nil {
		opts = append(opts, otlptracehttp.WithHeaders(map[string]string{
			"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password(u))),
		}))
	}
	return opts, nil
}

// shown is the endpoint as dlock prints it: its password masked, and
// anything after a '?' or '#' (which may hold a token) left out.
func shown(endpoint string) string {
	if i := strings.IndexAny(endpoint, "?#"); i >= 0 {
		endpoint = endpoint[:i] + "?…"
	}
	return masked(endpoint)
}

// scrubOTLP removes the endpoint's credentials from err's text, plainly,
// escaped and as the basic-authentication header carries them: an
// exporter's error, or a collector's reply, is text of someone else's that
// may echo them anywhere, so they are looked for as substrings (unlike a
// URL's, masked by position). The endpoint parsed, or there would be no
// exporter.
func scrubOTLP(err error, endpoint string) error {
	u, perr := url.Parse(endpoint)
	if perr != nil || u.User == nil {
		return err
	}
	text := err.Error()
	pw, escaped := password(u), ""
	if i := strings.Index(u.User.String(), ":"); i >= 0 {
		escaped = u.User.String()[i+1:]
	}
	for _, s := range []string{pw, escaped} {
		if len(s) >= 3 { // shorter, it would replace unrelated text
			text = strings.ReplaceAll(text, s, "xxxxx")
		}
	}
	for _, cred := range []string{u.User.Username() + ":" + pw, u.User.String()} {
		if b64 := base64.StdEncoding.EncodeToString([]byte(cred)); len(cred) > 1 {
			text = strings.ReplaceAll(text, b64, "xxxxx")
			text = strings.ReplaceAll(text, strings.TrimRight(b64, "="), "xxxxx")
		}
	}
	if text == err.Error() {
		return err
	}
	return errors.New(text)
}

// password is u's password, "" if none.
func password(u *url.URL) string {
	pw, _ := u.User.Password()
	return pw
}

// observe makes c report to the metrics and the tracing that are on
// (either may be nil).
func observe(c *dlock.Client, metrics *dlockprom.Metrics, tr *tracing) {
	var also []dlock.Observer
	if metrics != nil {
		also = append(also, metrics.Observe)
	}
	switch {
	case tr != nil:
		tr.in.Instrument(c, also...)
	case metrics != nil:
		c.SetObserver(metrics.Observe)
	}
}

// span starts a span of the command's own (nil tracing: none) under ctx.
func (tr *tracing) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tr == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tr.tracer().Start(ctx, name, trace.WithAttributes(attrs...))
}

// tracer is the command's own tracer (its spans: a run, a scenario, a
// fault).
func (tr *tracing) tracer() trace.Tracer { return tr.tp.Tracer("github.com/dlock-go/dlock/cmd/dlock") }

// env returns the environment entries that let a command continue ctx's
// trace (TRACEPARENT), or none when not tracing.
func (tr *tracing) env(ctx context.Context) []string {
	if tr == nil {
		return nil
	}
	return traceparent(ctx)
}

// traceparent returns ctx's trace context as W3C traceparent environment
// entries (TRACEPARENT=...), for a process to continue the trace.
func traceparent(ctx context.Context) []string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	var env []string
	for k, v := range carrier {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	return env
}

// fromTraceparent returns a context carrying the trace context in the
// environment's TRACEPARENT, if any.
func fromTraceparent(getenv func(string) string) context.Context {
	carrier := propagation.MapCarrier{"traceparent": getenv("TRACEPARENT")}
	return propagation.TraceContext{}.Extract(context.Background(), carrier)
}

// stop flushes the spans still buffered (a few seconds at most) and stops
// the export, saying how many exports failed.
func (tr *tracing) stop() {
	if tr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.tp.Shutdown(ctx); err != nil {
		tr.errs.Handle(err)
	}
	tr.errs.summary()
}

// exportErrors is the OpenTelemetry error handler while tracing: it says
// the first export error on stderr, with the endpoint's password scrubbed,
// and counts the rest for the summary at the end.
type exportErrors struct {
	endpoint string
	stderr   io.Writer
	mu       sync.Mutex
	n        int
}

// Handle implements otel.ErrorHandler.
func (h *exportErrors) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	if h.n == 1 {
		fmt.Fprintf(h.stderr, "dlock: exporting traces to %s: %v\n", shown(h.endpoint), scrubOTLP(err, h.endpoint))
	}
}

func (h *exportErrors) summary() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 1 {
		fmt.Fprintf(h.stderr, "dlock: exporting traces to %s: %d errors in all\n", shown(h.endpoint), h.n)
	}
}
