module github.com/dlock-go/dlock/bench

go 1.26.0

replace github.com/dlock-go/dlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/dlock-go/dlock v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redsync/redsync/v4 v4.18.1
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0
)
