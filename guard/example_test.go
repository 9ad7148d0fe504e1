package guard_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/redis/go-redis/v9"
)

// A guard refuses the write of a holder whose lock has passed to someone
// else since: the resource keeps the highest fence it accepted.
func ExampleRedis_For() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()
	g := guard.NewRedis(rdb)
	ctx := context.Background()

	first, err := locks.TryLock(ctx, "lock:example:stock", dlock.WithTTL(100*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	<-first.Context().Done() // the first holder stalls past its TTL...
	second, err := locks.Lock(ctx, "lock:example:stock")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Unlock(ctx)
	if err := g.For(second).Set(ctx, "example:stock", 41, 0); err != nil {
		fmt.Println(err)
		return
	}
	// ...and writes with the fence it had.
	err = g.Set(ctx, "example:stock", first.Fence(), 42, 0)
	fmt.Println("stale write refused:", errors.Is(err, guard.ErrStaleFence))
	// Output: stale write refused: true
}

// An SQL row is written only with a fence at least its own (the table has
// a BIGINT fence column); a stale holder's UPDATE is reported as such.
func ExampleSQLTable_Update() {
	var db *sql.DB // sql.Open("pgx", …), ("mysql", …) or ("sqlite", …)
	var lock *dlock.Lock
	ctx := context.Background()

	accounts := guard.SQLTable{Dialect: guard.Postgres, Table: "accounts", ID: "id"}
	err := accounts.For(lock).Update(ctx, db, "42", map[string]any{"balance": 90})
	switch {
	case errors.Is(err, guard.ErrStaleFence):
		fmt.Println("someone holds the lock since, and wrote the row: not written")
	case errors.Is(err, sql.ErrNoRows):
		fmt.Println("no account 42")
	case err != nil:
		fmt.Println("database trouble:", err)
	}
}

// A caller's script runs only with a fence at least the highest its first
// key has accepted, and sees only its own KEYS and ARGV.
func ExampleNewScript() {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	g := guard.NewRedis(rdb)
	ctx := context.Background()
	debit := guard.NewScript(`
		redis.call('DECRBY', KEYS[1], ARGV[1])
		return redis.call('RPUSH', KEYS[2], ARGV[1])`)
	keys := []string{"{example:acct}:balance", "{example:acct}:history"}

	_, err := g.Run(ctx, debit, 8, keys, 30) // fence 8, from the holder's Lock
	fmt.Println("debited:", err == nil)
	_, err = g.Run(ctx, debit, 7, keys, 30) // a stale holder's fence
	fmt.Println("stale debit refused:", errors.Is(err, guard.ErrStaleFence))
	// Output:
	// debited: true
	// stale debit refused: true
}
