package dlockotel_test

import (
	"context"
	"log"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
)

// Spans and metrics for every lock of a Client, through the global
// OpenTelemetry providers (set up by the application: an OTLP exporter, a
// sampler), with lock names chosen by Classify (never raw keys). The
// Prometheus adapter can observe the same Client: pass its Observe to
// Instrument after the Client.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	in, err := dlockotel.New(dlockotel.Options{Classify: func(key string) string {
		name, _, _ := strings.Cut(key, ":") // "order:1001" -> "order"
		return name
	}})
	if err != nil {
		log.Fatal(err)
	}
	in.Instrument(locks) // or in.Instrument(locks, promMetrics.Observe)

	// The request's span is the parent of dlock.acquire and dlock.hold;
	// the function runs inside dlock.hold.
	ctx, span := otel.Tracer("shop").Start(context.Background(), "checkout")
	defer span.End()
	err = locks.Do(ctx, "order:1001", func(ctx context.Context) error {
		return nil // charge the card, under the lock
	})
	if err != nil {
		log.Print(err)
	}
}
