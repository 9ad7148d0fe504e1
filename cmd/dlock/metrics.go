package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	flag "github.com/spf13/pflag"

	dlockprom "github.com/dlock-go/dlock/prometheus"
)

// metricsFlag is --metrics-addr: where to serve Prometheus metrics; and,
// for run, --metrics-linger: how long to go on serving them after the
// release.
type metricsFlag struct {
	addr   string
	linger time.Duration
}

func (m *metricsFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics while running (e.g. 127.0.0.1:9090)")
}

// registerLinger adds --metrics-linger.
func (m *metricsFlag) registerLinger(fs *flag.FlagSet) {
	fs.Var((*durationValue)(&m.linger), "metrics-linger", "with --metrics-addr, go on serving the metrics this long after the release, so that a scrape sees the hold's time and the release's result (0: exit at once; a signal ends it early)")
}

// serve starts the metrics endpoint, if asked for, and returns the metrics
// to feed and a function that stops the server. Their "lock" label is
// classify's name for a key (nil: none, "").
func (m *metricsFlag) serve(stderr io.Writer, classify func(string) string) (*dlockprom.Metrics, func(), error) {
	if m.addr == "" {
		return nil, func() {}, nil
	}
	metrics := dlockprom.New(dlockprom.Options{Classify: classify})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "dlock: metrics: %v\n", err)
		}
	}()
	return metrics, func() { srv.Close() }, nil
}

// lingerAfter waits out --metrics-linger, when metrics are served, or
// until a signal on sigs ends it: a scrape in the meantime sees the final
// counts of a run that is over.
func (m *metricsFlag) lingerAfter(sigs <-chan os.Signal) {
	if m.addr == "" || m.linger <= 0 {
		return
	}
	t := time.NewTimer(m.linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-sigs:
	}
}
