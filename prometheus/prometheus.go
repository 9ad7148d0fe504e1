// Package prometheus turns dlock's lock events into Prometheus metrics.
//
//	m := prometheus.New(prometheus.Options{Namespace: "myapp"})
//	registry.MustRegister(m)
//	locks.SetObserver(m.Observe)
//
// Lock keys are not labels by default: there can be one per order, job or
// user, and every label value is a time series. Options.Classify may map
// keys to a small, fixed set of names, which become the "lock" label. The
// "primitive" label says what was taken: lock, election, semaphore, read or
// write (dlock.Event.Primitive), a fixed set of five.
package prometheus

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
)

// Options configures the metrics.
type Options struct {
	// Namespace prefixes every metric name (default "dlock" alone).
	Namespace string
	// Classify maps a lock key to the value of the "lock" label. It must
	// return few distinct values. Default: every key is "" (no label
	// value), keeping cardinality at one series per result.
	Classify func(key string) string
	// Buckets for the wait and hold histograms, in seconds. Default:
	// 100 µs to about 100 s, in factors of 4.
	Buckets []float64
}

// Metrics is a prometheus.Collector fed by dlock events.
type Metrics struct {
	classify func(string) string

	acquires *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	renewals *prometheus.CounterVec
	lost     *prometheus.CounterVec
	releases *prometheus.CounterVec
	hold     *prometheus.HistogramVec
}

var _ prometheus.Collector = (*Metrics)(nil)

// New returns the metrics; register them and pass Observe to
// Client.SetObserver.
func New(o Options) *Metrics {
	if o.Classify == nil {
		o.Classify = func(string) string { return "" }
	}
	if o.Buckets == nil {
		o.Buckets = prometheus.ExponentialBuckets(0.0001, 4, 11)
	}
	name := func(n string) string {
		if o.Namespace != "" {
			return o.Namespace + "_dlock_" + n
		}
		return "dlock_" + n
	}
	return &Metrics{
		classify: o.Classify,
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("acquires_total"),
			Help: "Lock acquisitions by result: obtained, contended (held by someone else, or the wait ended), error (Redis failed, or too few Redlock nodes answered)."}, []string{"lock", "primitive", "result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("acquire_wait_seconds"),
			Help: "How long TryLock, Lock and Do took to obtain the lock or give up.", Buckets: o.Buckets}, []string{"lock", "primitive", "result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("renewals_total"),
			Help: "Lease renewals (watchdog or Extend) by result: ok, not_held, error."}, []string{"lock", "primitive", "result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("lost_total"),
			Help: "Locks lost while held, by cause: token_gone, lease_expired, max_hold."}, []string{"lock", "primitive", "cause"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("releases_total"),
			Help: "Unlocks by result: ok, token_mismatch (the lock had expired; perhaps someone else held it), error."}, []string{"lock", "primitive", "result"}),
		hold: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name("hold_seconds"),
			Help: "How long locks were held, from the acquire request to Unlock.", Buckets: o.Buckets}, []string{"lock", "primitive"}),
	}
}

// Observe records one event. Pass it to dlock.Client.SetObserver (or to
// dlock.Observers, beside other observers). Results and causes are
// dlock.Event.Outcome's words.
func (m *Metrics) Observe(e dlock.Event) {
	lock := m.classify(e.Key)
	switch e.Kind {
	case dlock.EventAcquire:
		m.acquires.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
		m.wait.WithLabelValues(lock, e.Primitive, e.Outcome()).Observe(e.Wait.Seconds())
	case dlock.EventRenew:
		m.renewals.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
	case dlock.EventLost:
		m.lost.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
	case dlock.EventRelease:
		m.releases.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
		if e.Err == nil {
			m.hold.WithLabelValues(lock, e.Primitive).Observe(e.Held.Seconds())
		}
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquires, m.wait, m.renewals, m.lost, m.releases, m.hold}
}
