package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver on loopback: it decodes what
// the exporter sends, as a collector would.
type collector struct {
	*httptest.Server
	mu    sync.Mutex
	spans []exported
	auth  []string
}

// exported is a received span with the service that sent it.
type exported struct {
	service string
	span    *tracepb.Span
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		data, _ := io.ReadAll(body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.auth = append(c.auth, r.Header.Get("Authorization"))
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, exported{service, s})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) received() []exported {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]exported(nil), c.spans...)
}

func (c *collector) named(name string) []exported {
	var out []exported
	for _, e := range c.received() {
		if e.span.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func TestRunExportsItsTrace(t *testing.T) {
	col := newCollector(t)
	k := key(t)
	endpoint := strings.Replace(col.URL, "http://", "http://otel:hunter22@", 1)
	code, _, stderr := run(t, "run", "--key", k, "--otlp-endpoint", endpoint, "--", "sh", "-c", `test -n "$TRACEPARENT"`)
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	if strings.Contains(stderr, "hunter22") {
		t.Fatalf("stderr shows the endpoint's password: %s", stderr)
	}
	roots := col.named("dlock run")
	if len(roots) != 1 {
		t.Fatalf("%d 'dlock run' spans (received %d spans)", len(roots), len(col.received()))
	}
	root := roots[0].span
	for _, name := range []string{"dlock.acquire", "dlock.hold", "dlock.release"} {
		got := col.named(name)
		if len(got) != 1 {
			t.Fatalf("%d %s spans", len(got), name)
		}
		s := got[0]
		if s.service != "dlock" || !bytes.Equal(s.span.TraceId, root.TraceId) || !bytes.Equal(s.span.ParentSpanId, root.SpanId) {
			t.Errorf("%s: service %q, trace %s parent %s; want dlock, under the run's span %s", name, s.service,
				hex.EncodeToString(s.span.TraceId), hex.EncodeToString(s.span.ParentSpanId), hex.EncodeToString(root.SpanId))
		}
		for _, a := range s.span.Attributes {
			if strings.Contains(a.Value.String(), k) {
				t.Errorf("%s carries the key in %s", name, a.Key)
			}
		}
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.auth) == 0 || col.auth[0] != "Basic b3RlbDpodW50ZXIyMg==" {
		t.Errorf("Authorization %q, want the URL's user and password as basic auth", col.auth)
	}
}

func TestABadOTLPEndpointIsRefusedWithoutItsPassword(t *testing.T) {
	for _, endpoint := range []string{"127.0.0.1:4318", "ftp://u:pw-secret@127.0.0.1:21", "http://u:pw-secret@[::1", "http://u:pw-secret@"} {
		code, _, stderr := run(t, "run", "--key", key(t), "--otlp-endpoint", endpoint, "--", "true")
		if code != exitUsage || !strings.Contains(stderr, "--otlp-endpoint") {
			t.Errorf("%q: exit %d, %q; want a usage error naming the flag", endpoint, code, stderr)
		}
		if strings.Contains(stderr, "pw-secret") {
			t.Errorf("%q: stderr shows the password: %q", endpoint, stderr)
		}
	}
}

func TestTortureTracesTheScenarioAndItsClients(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	if testing.Short() {
		t.Skip("runs a torture scenario")
	}
	col := newCollector(t)
	code, _, stderr := run(t, "torture", "--quick", "--scenario", "client-pause", "--duration", "2s", "--otlp-endpoint", col.URL)
	if code != 0 {
		t.Fatalf("torture exited %d: %s", code, stderr)
	}
	roots := map[string]*tracepb.Span{}
	for _, e := range col.received() {
		if strings.HasPrefix(e.span.Name, "dlock torture client-pause/") {
			roots[hex.EncodeToString(e.span.TraceId)] = e.span
		}
	}
	if len(roots) != 2 { // single and redlock
		t.Fatalf("%d scenario spans, want 2", len(roots))
	}
	faults, holds := 0, 0
	for _, e := range col.received() {
		root, ok := roots[hex.EncodeToString(e.span.TraceId)]
		switch {
		case strings.HasPrefix(e.span.Name, "fault: "):
			faults++
			if !ok || !bytes.Equal(e.span.ParentSpanId, root.SpanId) || e.span.StartTimeUnixNano >= e.span.EndTimeUnixNano {
				t.Errorf("fault span %q not a child of its scenario's, or empty", e.span.Name)
			}
		case e.span.Name == "dlock.hold":
			holds++
			if !ok || e.service != "dlock-torture-client" || !bytes.Equal(e.span.ParentSpanId, root.SpanId) {
				t.Errorf("a client's hold span (service %q) is not under its scenario's span", e.service)
			}
		}
	}
	if faults < 2 || holds < 2 {
		t.Errorf("%d fault spans and %d client holds, want the pauses and the holds of both runs", faults, holds)
	}
}

// A collector that refuses the export and echoes the credentials back (as
// its error body) does not get them printed, in any encoding.
func TestACollectorsEchoOfTheCredentialsIsNotPrinted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad credentials: "+r.Header.Get("Authorization"), http.StatusUnauthorized)
	}))
	defer srv.Close()
	endpoint := strings.Replace(srv.URL, "http://", "http://u:pw-secret@", 1)
	code, _, stderr := run(t, "run", "--key", key(t), "--otlp-endpoint", endpoint, "--", "true")
	if code != 0 {
		t.Fatalf("run exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "exporting traces") {
		t.Fatalf("the failed export is not reported: %q", stderr)
	}
	for _, secret := range []string{"pw-secret", "dTpwdy1zZWNyZXQ"} { // base64("u:pw-secret")
		if strings.Contains(stderr, secret) {
			t.Errorf("stderr shows %q: %q", secret, stderr)
		}
	}
}

// A query string would not be sent: the endpoint is refused, and what
// follows the '?' (a token, perhaps) is not printed.
func TestAnOTLPEndpointWithAQueryIsRefused(t *testing.T) {
	code, _, stderr := run(t, "run", "--key", key(t), "--otlp-endpoint", "http://127.0.0.1:4318/v1/traces?token=tok-secret", "--", "true")
	if code != exitUsage || !strings.Contains(stderr, "query") || strings.Contains(stderr, "tok-secret") {
		t.Fatalf("exit %d, %q; want a usage error about the query, without it", code, stderr)
	}
}
