module github.com/dlock-go/dlock/console

go 1.26.0

require (
	github.com/dlock-go/dlock v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require go.uber.org/goleak v1.3.0
