package console_test

import (
	"log"
	"net/http"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/console"
	"github.com/redis/go-redis/v9"
)

// A service mounts the console under /locks/, read-only.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	con, err := console.New(console.Config{Locks: locks, Nodes: []redis.UniversalClient{rdb}, Pattern: "job:*"})
	if err != nil {
		log.Fatal(err)
	}
	defer con.Close()
	mux := http.NewServeMux()
	mux.Handle("/locks/", http.StripPrefix("/locks", con))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// Revocation from the page, for the users a service's own authentication
// says are operators.
func ExampleConfig_revoke() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	con, err := console.New(console.Config{Locks: locks, Nodes: []redis.UniversalClient{rdb}, Revoke: true,
		Authorize: func(r *http.Request) (string, bool) {
			user, pass, ok := r.BasicAuth()
			return user, ok && user == "ops" && pass == "change me" // use your service's own check
		},
		Auth: "basic",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer con.Close()
	_ = http.ListenAndServe("127.0.0.1:8080", con)
}
