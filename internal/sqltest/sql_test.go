package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
)

// store is one database under test, with a fresh table per test:
// accounts(id, owner, balance, fence).
type store struct {
	name string
	db   *sql.DB
	t    guard.SQLTable
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stores opens the three databases: PostgreSQL and MariaDB servers of
// their own, and an SQLite file.
func stores(t *testing.T) []store {
	var out []store
	pg := redistest.StartPostgres(t)
	out = append(out, open(t, "postgres", "pgx", pg.DSN, guard.Postgres))
	my := redistest.StartMariaDB(t)
	out = append(out, open(t, "mariadb", "mysql", my.DSN, guard.MySQL))
	out = append(out, open(t, "sqlite", "sqlite", "file:"+filepath.Join(t.TempDir(), "db.sqlite")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)", guard.SQLite))
	return out
}

func open(t *testing.T, name, driver, dsn string, d guard.SQLDialect) store {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(ctxT(t)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	table := fmt.Sprintf("accounts_%d", rand.Uint32())
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+table+" (id VARCHAR(64) PRIMARY KEY, owner VARCHAR(64), balance BIGINT, fence BIGINT)"); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return store{name: name, db: db, t: guard.SQLTable{Dialect: d, Table: table, ID: "id"}}
}

func (s store) row(t *testing.T, id string) (balance, fence int64) {
	t.Helper()
	if err := s.db.QueryRowContext(ctxT(t), "SELECT balance, fence FROM "+s.t.Table+" WHERE id = "+s.ph(), id).Scan(&balance, &fence); err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return balance, fence
}

func (s store) ph() string {
	if s.t.Dialect == guard.Postgres {
		return "$1"
	}
	return "?"
}

func TestGuardedRowsOnEveryDatabase(t *testing.T) {
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Run("check", func(t *testing.T) { checkTable(t, s) })
			t.Run("upsert and update", func(t *testing.T) { upsertAndUpdate(t, s) })
			t.Run("concurrent writers", func(t *testing.T) { concurrentWriters(t, s) })
			t.Run("bad input", func(t *testing.T) { badInput(t, s) })
			t.Run("in a transaction", func(t *testing.T) { inATransaction(t, s) })
		})
	}
}

func checkTable(t *testing.T, s store) {
	if err := s.t.Check(ctxT(t), s.db); err != nil {
		t.Fatal(err)
	}
	// A table without the fence column, and one whose fence is text.
	bare := s.t.Table + "_bare"
	text := s.t.Table + "_text"
	for _, ddl := range []string{
		"CREATE TABLE " + bare + " (id VARCHAR(64) PRIMARY KEY, balance BIGINT)",
		"CREATE TABLE " + text + " (id VARCHAR(64) PRIMARY KEY, balance BIGINT, fence VARCHAR(32))",
	} {
		if _, err := s.db.ExecContext(ctxT(t), ddl); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []string{bare, text, s.t.Table + "_missing"} {
		bad := s.t
		bad.Table = tb
		err := bad.Check(ctxT(t), s.db)
		if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tb) {
			t.Errorf("Check of %s: %v", tb, err)
		}
		if tb == bare {
			// A write says so too.
			err := bad.Upsert(ctxT(t), s.db, 5, "x", map[string]any{"balance": 1})
			if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "fence") {
				t.Errorf("a write to %s: %v", tb, err)
			}
		}
	}
}

func upsertAndUpdate(t *testing.T, s store) {
	ctx := ctxT(t)
	vals := func(b int64) map[string]any { return map[string]any{"balance": b, "owner": "ann"} }
	if err := s.t.Upsert(ctx, s.db, 100, "a", vals(10)); err != nil {
		t.Fatal(err)
	}
	if err := s.t.Upsert(ctx, s.db, 100, "a", vals(10)); err != nil {
		t.Fatalf("the same write again: %v", err)
	}
	if err := s.t.Upsert(ctx, s.db, 120, "a", vals(20)); err != nil {
		t.Fatal(err)
	}
	err := s.t.Upsert(ctx, s.db, 110, "a", vals(99))
	var stale *guard.StaleFenceError
	if !errors.As(err, &stale) || !errors.Is(err, guard.ErrStaleFence) || stale.Highest != 120 || stale.Fence != 110 {
		t.Fatalf("a stale upsert: %v", err)
	}
	if err := s.t.Update(ctx, s.db, 119, "a", vals(98)); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("a stale update: %v", err)
	}
	if b, f := s.row(t, "a"); b != 20 || f != 120 {
		t.Fatalf("row a: balance %d fence %d", b, f)
	}
	if err := s.t.Update(ctx, s.db, 120, "a", vals(25)); err != nil {
		t.Fatal(err)
	}
	if err := s.t.Update(ctx, s.db, 130, "nobody", vals(1)); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("update of a missing row: %v", err)
	}
	// A row that predates the fence column (NULL) takes any fence.
	if _, err := s.db.ExecContext(ctx, "INSERT INTO "+s.t.Table+" (id, balance) VALUES ('old', 1)"); err != nil {
		t.Fatal(err)
	}
	if err := s.t.Update(ctx, s.db, 1, "old", vals(2)); err != nil {
		t.Fatalf("a NULL fence: %v", err)
	}
	if b, f := s.row(t, "old"); b != 2 || f != 1 {
		t.Fatalf("row old: balance %d fence %d", b, f)
	}
}

// Writers with interleaved fences on one row: the highest fence's value
// stands, and no write below an accepted fence lands (the log table,
// written in the same transaction as the guarded write, says so).
func concurrentWriters(t *testing.T, s store) {
	ctx := ctxT(t)
	const rows, writers, each = 6, 8, 5
	for r := 0; r < rows; r++ { // each row starts missing: the first writers race to insert it
		id := fmt.Sprintf("hot%d", r)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var highest int64
		errs := make(chan error, writers*each)
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					fence := 1 + rand.Int64N(1000)
					err := s.t.Upsert(ctx, s.db, fence, id, map[string]any{"balance": fence})
					switch {
					case err == nil:
						mu.Lock()
						highest = max(highest, fence)
						mu.Unlock()
					case errors.Is(err, guard.ErrStaleFence):
					case s.t.Dialect == guard.MySQL && strings.Contains(err.Error(), "Deadlock"):
						// InnoDB may abort one of two racing writers:
						// the caller retries; nothing was written.
					default:
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if b, f := s.row(t, id); f != highest || b != highest {
			t.Fatalf("row %s: balance %d fence %d, highest accepted %d", id, b, f, highest)
		}
	}
}

func badInput(t *testing.T, s store) {
	ctx := ctxT(t)
	v := map[string]any{"balance": 1}
	bad := func(mod func(*guard.SQLTable)) guard.SQLTable { c := s.t; mod(&c); return c }
	for name, err := range map[string]error{
		"fence 0":            s.t.Upsert(ctx, s.db, 0, "x", v),
		"negative fence":     s.t.Update(ctx, s.db, -1, "x", v),
		"the fence as value": s.t.Upsert(ctx, s.db, 5, "x", map[string]any{"fence": 9}),
		"the id as value":    s.t.Upsert(ctx, s.db, 5, "x", map[string]any{"id": "y"}),
		"injected column":    s.t.Upsert(ctx, s.db, 5, "x", map[string]any{"balance = 0; --": 1}),
		"injected table":     bad(func(c *guard.SQLTable) { c.Table = "t; DROP TABLE x" }).Upsert(ctx, s.db, 5, "x", v),
		"no dialect":         bad(func(c *guard.SQLTable) { c.Dialect = 0 }).Upsert(ctx, s.db, 5, "x", v),
		"empty id column":    bad(func(c *guard.SQLTable) { c.ID = "" }).Upsert(ctx, s.db, 5, "x", v),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A column the table does not have is the database's error.
	if err := s.t.Upsert(ctx, s.db, 5, "x", map[string]any{"nope": 1}); err == nil {
		t.Error("a missing column was accepted")
	}
}

func inATransaction(t *testing.T, s store) {
	ctx := ctxT(t)
	if err := s.t.Upsert(ctx, s.db, 50, "tx", map[string]any{"balance": 5}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.t.Update(ctx, tx, 40, "tx", map[string]any{"balance": 4}); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("stale in a transaction: %v", err)
	}
	if err := s.t.Update(ctx, tx, 60, "tx", map[string]any{"balance": 6}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, f := s.row(t, "tx"); b != 6 || f != 60 {
		t.Fatalf("row tx: balance %d fence %d", b, f)
	}
}

// The lock's deployment fails over to a replica that never saw the last
// grant: two hold the lock. The new holder's fence is higher (fence.go),
// so the old holder's write to the row is refused; and a holder told its
// lock is gone does not even send it.
func TestAStaleHolderAfterAFailoverIsRefusedByTheRow(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	mrdb, rrdb := master.Client(t), replica.Client(t)
	ml, rl := dlock.New(mrdb), dlock.New(rrdb)
	defer ml.Close()
	defer rl.Close()
	ctx := ctxT(t)
	s := open(t, "sqlite", "sqlite", "file:"+filepath.Join(t.TempDir(), "db.sqlite"), guard.SQLite)
	k := fmt.Sprintf("account:%d", rand.Uint32())
	warm, err := ml.TryLock(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mrdb.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rrdb.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	stale, err := ml.TryLock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.t.For(stale).Upsert(ctx, s.db, "42", map[string]any{"balance": 100}); err != nil {
		t.Fatal(err)
	}
	master.Kill()
	if err := rrdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	current, err := rl.TryLock(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.t.For(current).Update(ctx, s.db, "42", map[string]any{"balance": 90}); err != nil {
		t.Fatal(err)
	}
	if err := s.t.For(stale).Update(ctx, s.db, "42", map[string]any{"balance": 110}); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("the old master's holder wrote: %v", err)
	}
	if err := current.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.t.For(current).Update(ctx, s.db, "42", map[string]any{"balance": 80}); !errors.Is(err, dlock.ErrReleased) {
		t.Fatalf("a write after Unlock: %v", err)
	}
	if b, f := s.row(t, "42"); b != 90 || f != current.Fence() {
		t.Fatalf("row 42: balance %d fence %d", b, f)
	}
}

// The review's cases: a REPEATABLE READ transaction that read the row
// before a newer writer; MySQL's clientFoundRows; another unique key.
func TestGuardedRowsInTheCornersOfEachDatabase(t *testing.T) {
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			ctx := ctxT(t)
			if err := s.t.Upsert(ctx, s.db, 5, "rr", map[string]any{"balance": 1}); err != nil {
				t.Fatal(err)
			}
			if s.t.Dialect != guard.SQLite { // SQLite transactions are serial: no snapshot to go stale
				tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
				if err != nil {
					t.Fatal(err)
				}
				var b int64
				if err := tx.QueryRowContext(ctx, "SELECT balance FROM "+s.t.Table+" WHERE id = 'rr'").Scan(&b); err != nil {
					t.Fatal(err)
				}
				if err := s.t.Update(ctx, s.db, 20, "rr", map[string]any{"balance": 20}); err != nil { // a newer holder, elsewhere
					t.Fatal(err)
				}
				for name, err := range map[string]error{
					"Update": s.t.Update(ctx, tx, 10, "rr", map[string]any{"balance": 10}),
					"Upsert": s.t.Upsert(ctx, tx, 10, "rr", map[string]any{"balance": 10}),
				} {
					// PostgreSQL refuses to serialize; MySQL's locking
					// reads see the newer row: never a stale write taken.
					if err == nil {
						t.Errorf("%s with a stale fence in a REPEATABLE READ transaction was accepted", name)
					}
				}
				_ = tx.Rollback()
				if b, f := s.row(t, "rr"); b != 20 || f != 20 {
					t.Fatalf("row rr: balance %d fence %d", b, f)
				}
			}
			// Another unique key: the upsert of a new row that collides
			// on it must not touch the other row.
			uniq := s.t.Table + "_uniq"
			if _, err := s.db.ExecContext(ctx, "CREATE TABLE "+uniq+" (id VARCHAR(64) PRIMARY KEY, email VARCHAR(64) UNIQUE, fence BIGINT)"); err != nil {
				t.Fatal(err)
			}
			u := s.t
			u.Table = uniq
			if err := u.Upsert(ctx, s.db, 10, "alice", map[string]any{"email": "x@y"}); err != nil {
				t.Fatal(err)
			}
			if err := u.Upsert(ctx, s.db, 30, "bob", map[string]any{"email": "x@y"}); err == nil || errors.Is(err, guard.ErrStaleFence) {
				t.Fatalf("bob's upsert on alice's email: %v", err)
			}
			var id string
			var f int64
			if err := s.db.QueryRowContext(ctx, "SELECT id, fence FROM "+uniq+" WHERE email = 'x@y'").Scan(&id, &f); err != nil || id != "alice" || f != 10 {
				t.Fatalf("the email's row: %s fence %d, %v", id, f, err)
			}
			// A cancelled context is the context's error, not a bad table.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.t.Check(cctx, s.db); err == nil || errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Check with a cancelled context: %v", err)
			}
			if err := s.t.Update(cctx, s.db, 99, "rr", map[string]any{"balance": 1}); err == nil || errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Update with a cancelled context: %v", err)
			}
			// Columns that cannot hold every fence.
			for i, typ := range []string{"NUMERIC(2)", "DECIMAL(3,0)", "INT", "TEXT"} {
				tb := fmt.Sprintf("%s_t%d", s.t.Table, i)
				if _, err := s.db.ExecContext(ctx, "CREATE TABLE "+tb+" (id VARCHAR(64) PRIMARY KEY, fence "+typ+")"); err != nil {
					t.Fatal(err)
				}
				bad := s.t
				bad.Table = tb
				if err := bad.Check(ctx, s.db); !errors.Is(err, dlock.ErrInvalidArgument) && !(s.t.Dialect == guard.SQLite && typ == "INT") {
					t.Errorf("a %s fence column passed Check: %v", typ, err)
				}
			}
		})
	}
	// MySQL with clientFoundRows, which counts matched rows.
	my := redistest.StartMariaDB(t)
	s := open(t, "mariadb-cfr", "mysql", my.DSN+"?clientFoundRows=true", guard.MySQL)
	ctx := ctxT(t)
	if err := s.t.Upsert(ctx, s.db, 10, "c", map[string]any{"balance": 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.t.Upsert(ctx, s.db, 5, "c", map[string]any{"balance": 5}); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("clientFoundRows: a stale upsert: %v", err)
	}
	if err := s.t.Upsert(ctx, s.db, 10, "c", map[string]any{"balance": 10}); err != nil {
		t.Fatalf("clientFoundRows: the same write again: %v", err)
	}
}

// Names are quoted: a column named as a keyword is a column on every
// database. Two values for one column (names that differ in case only),
// a nil database handle and a guard bound to a nil Lock are bad input,
// refused before anything is sent.
func TestKeywordColumnsCaseDuplicatesAndNilArguments(t *testing.T) {
	for _, s := range stores(t) {
		t.Run(s.name, func(t *testing.T) {
			ctx := ctxT(t)
			table := s.t.Table + "_kw"
			if _, err := s.db.ExecContext(ctx, "CREATE TABLE "+table+" (id VARCHAR(64) PRIMARY KEY, "+quoted(s, "order")+" BIGINT, fence BIGINT)"); err != nil {
				t.Fatal(err)
			}
			kw := guard.SQLTable{Dialect: s.t.Dialect, Table: table, ID: "id"}
			if err := kw.Upsert(ctx, s.db, 1, "a", map[string]any{"order": 7}); err != nil {
				t.Fatalf("a column named order: %v", err)
			}
			if err := kw.Update(ctx, s.db, 2, "a", map[string]any{"order": 8}); err != nil {
				t.Fatalf("an update of a column named order: %v", err)
			}
			for what, err := range map[string]error{
				"val and VAL":   s.t.Upsert(ctx, s.db, 3, "b", map[string]any{"balance": 1, "BALANCE": 2}),
				"a nil *sql.DB": s.t.Upsert(ctx, (*sql.DB)(nil), 3, "b", map[string]any{"balance": 1}),
				"a nil SQLDB":   s.t.Update(ctx, nil, 3, "b", map[string]any{"balance": 1}),
				"a nil Lock":    s.t.For(nil).Upsert(ctx, s.db, "b", map[string]any{"balance": 1}),
			} {
				if !errors.Is(err, dlock.ErrInvalidArgument) {
					t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
				}
			}
		})
	}
}

// quoted quotes a name in s's dialect, for the test's own DDL.
func quoted(s store, name string) string {
	if s.t.Dialect == guard.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}
