package prometheus_test

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	dlockprom "github.com/dlock-go/dlock/prometheus"
)

// Metrics for every lock of a Client, labelled by a few lock names chosen
// by Classify (never by raw keys, which would make a series per key), served
// at /metrics.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	m := dlockprom.New(dlockprom.Options{Classify: func(key string) string {
		name, _, _ := strings.Cut(key, ":") // "order:1001" -> "order"
		return name
	}})
	prometheus.MustRegister(m)
	locks.SetObserver(m.Observe)

	http.Handle("/metrics", promhttp.Handler())
	_ = http.ListenAndServe("127.0.0.1:9090", nil)
}
