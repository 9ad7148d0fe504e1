package dlock

import "time"

const (
	// DefaultTTL is the lock's time to live when WithTTL is not given: the
	// same 30 s that Redisson's watchdog uses. It is both how long a crashed
	// holder blocks others and how long a holder may work without renewing.
	DefaultTTL = 30 * time.Second

	// MinTTL is the shortest TTL accepted. Below it, the round trip and the
	// clock-drift margin take up most of the lease, and the lock would be
	// lost before the holder could do anything with it.
	MinTTL = 10 * time.Millisecond

	// MaxTTL is the longest TTL accepted. A lease of more than a year is
	// a unit mistake, not a plan; a lock meant to be held that long should
	// be renewed.
	MaxTTL = 365 * 24 * time.Hour
)

// Option configures one acquisition (TryLock, Lock).
type Option func(*options)

// options holds one acquisition's settings. Defaults are filled in by
// newOptions and nowhere else.
type options struct {
	// ttl is the lease: the key expires this long after it is set or
	// extended unless it is released first. Default DefaultTTL; at least
	// MinTTL, at most MaxTTL; whole milliseconds (anything finer is truncated).
	ttl time.Duration
}

// WithTTL sets the lock's time to live (default DefaultTTL, from MinTTL to
// MaxTTL).
// Redis keeps milliseconds, so finer precision is truncated.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.ttl = d }
}

func newOptions(opts []Option) (options, error) {
	o := options{ttl: DefaultTTL}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := checkTTL(o.ttl); err != nil {
		return o, err
	}
	o.ttl = o.ttl.Truncate(time.Millisecond)
	return o, nil
}

func checkTTL(d time.Duration) error {
	if d < MinTTL {
		return invalid("TTL %v is below the minimum %v", d, MinTTL)
	}
	if d > MaxTTL {
		return invalid("TTL %v is above the maximum %v", d, MaxTTL)
	}
	return nil
}
