package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	dlockprom "github.com/dlock-go/dlock/prometheus"
)

// metricsFlag is --metrics-addr: where to serve Prometheus metrics.
type metricsFlag struct{ addr string }

func (m *metricsFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&m.addr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics while running (e.g. 127.0.0.1:9090)")
}

// serve starts the metrics endpoint, if asked for, and returns the metrics
// to feed and a function that stops the server.
func (m *metricsFlag) serve(stderr io.Writer) (*dlockprom.Metrics, func(), error) {
	if m.addr == "" {
		return nil, func() {}, nil
	}
	metrics := dlockprom.New(dlockprom.Options{})
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
