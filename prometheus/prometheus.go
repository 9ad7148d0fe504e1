// Package prometheus turns dlock's lock events into Prometheus metrics.
//
//	m := prometheus.New(prometheus.Options{Namespace: "myapp"})
//	registry.MustRegister(m)
//	locks.SetObserver(m.Observe)
//
// Lock keys are not labels by default: there can be one per order, job or
// user, and every label value is a time series. Options.Classify may map
// keys to a small, fixed set of names, which become the "lock" label. The
// "primitive" label says what was taken: lock, election, semaphore or
// rwmutex (dlock.Event.Primitive, as dlock.Status.Kind), a fixed set of
// four; a read-write lock's reads and writes share "rwmutex".
//
// Counters and histograms record what ended; two gauges show the holds
// while they last (dlock_holds, dlock_oldest_hold_seconds), so that a
// hold is seen before its release, and a stuck one before it ends.
package prometheus

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlock-go/dlock"
)

// Options configures the metrics.
type Options struct {
	// Namespace prefixes every metric name: NAMESPACE_dlock_acquires_total
	// (default: none, dlock_acquires_total). The Grafana dashboard takes
	// the prefix, "NAMESPACE_dlock", from its variable "prefix".
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
	open     *holds
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
		open:     newHolds(name),
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
		if e.Err == nil {
			m.open.start(e, lock)
		}
	case dlock.EventRenew:
		m.renewals.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
	case dlock.EventLost:
		m.open.end(e)
		m.lost.WithLabelValues(lock, e.Primitive, e.Outcome()).Inc()
	case dlock.EventRelease:
		m.open.end(e)
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
	return []prometheus.Collector{m.acquires, m.wait, m.renewals, m.lost, m.releases, m.hold, m.open}
}

// holds are the holds obtained and not yet released or lost, for the
// gauges that show them while they last: a short-lived process (dlock
// run) records its hold time and release only as it exits, too late for
// most scrapes, and a stuck holder's hold time only once it ends.
//
// A hold is known by its key, primitive and fence (each grant has a fence
// of its own), so that a release after the loss is not counted twice. A
// hold whose end is never observed (the observer removed meanwhile) stays
// until the Metrics go.
type holds struct {
	count, oldest *prometheus.Desc

	mu   sync.Mutex
	open map[holdID]hold
	seen map[labels]bool // every label pair held once: its gauges stay, at 0, after its holds end
}

// holdID is one grant.
type holdID struct {
	key, primitive string
	fence          int64
}

// hold is an open hold: its labels and when it was granted.
type hold struct {
	labels
	since time.Time
}

// labels are the gauges' label values: the classified key, the primitive.
type labels struct{ lock, primitive string }

func newHolds(name func(string) string) *holds {
	return &holds{
		count: prometheus.NewDesc(name("holds"),
			"Locks held now: obtained and not yet released or lost.", []string{"lock", "primitive"}, nil),
		oldest: prometheus.NewDesc(name("oldest_hold_seconds"),
			"How long the longest-held lock held now has been held (0 when none is).", []string{"lock", "primitive"}, nil),
		open: map[holdID]hold{},
		seen: map[labels]bool{},
	}
}

// start records the grant of acquire event e, labelled lock.
func (h *holds) start(e dlock.Event, lock string) {
	l := labels{lock, e.Primitive}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open[holdID{e.Key, e.Primitive, e.Fence}] = hold{l, time.Now()}
	h.seen[l] = true
}

// end records the end (release or loss) of the hold of event e.
func (h *holds) end(e dlock.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.open, holdID{e.Key, e.Primitive, e.Fence})
}

// Describe implements prometheus.Collector.
func (h *holds) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.count
	ch <- h.oldest
}

// Collect implements prometheus.Collector.
func (h *holds) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	counts, oldest := map[labels]int{}, map[labels]time.Duration{}
	now := time.Now()
	for _, hd := range h.open {
		counts[hd.labels]++
		oldest[hd.labels] = max(oldest[hd.labels], now.Sub(hd.since))
	}
	seen := make([]labels, 0, len(h.seen))
	for l := range h.seen {
		seen = append(seen, l)
	}
	h.mu.Unlock()
	for _, l := range seen {
		ch <- prometheus.MustNewConstMetric(h.count, prometheus.GaugeValue, float64(counts[l]), l.lock, l.primitive)
		ch <- prometheus.MustNewConstMetric(h.oldest, prometheus.GaugeValue, oldest[l].Seconds(), l.lock, l.primitive)
	}
}
