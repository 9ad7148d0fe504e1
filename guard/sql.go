package guard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/argerr"
)

// Fenced rows in SQL
//
// The same rule as the Redis guard's, kept by the database: each row of a table has
// a fence column, the highest fence that wrote the row, and a write lands
// only with a fence at least the row's, in the one statement that writes:
//
//	UPDATE t SET c = ?, fence = ? WHERE id = ? AND COALESCE(fence, 0) <= ?
//
// The database evaluates the condition on the row it locks for the update
// (PostgreSQL re-checks it on the newest row version after waiting for a
// concurrent writer; InnoDB updates read the latest committed row; SQLite
// writes under its database lock), so no write comes between the check and
// the write. The fence is per row: rows are resources, each guarded by its
// own lock or by one lock for many. A NULL fence (a column added to a table
// that has rows) counts as 0: any fence may write it. One lock per row, as
// for Redis: fences of different locks are different counters.
//
// The fence column must be a 64-bit integer (BIGINT; INTEGER on SQLite) or
// a NUMERIC: a text column would compare "9" above "10", a 32-bit one
// cannot hold a fence. SQLTable.Check refuses other columns.

// SQLDialect is how a database spells placeholders and upserts.
type SQLDialect int

const (
	// Postgres: PostgreSQL ($1 placeholders, INSERT … ON CONFLICT).
	Postgres SQLDialect = iota + 1
	// MySQL: MySQL and MariaDB (? placeholders; an upsert is the guarded
	// UPDATE, then an INSERT if no row has the ID).
	MySQL
	// SQLite: SQLite 3.24 or later (? placeholders, INSERT … ON CONFLICT).
	SQLite
)

// String returns the dialect's name.
func (d SQLDialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "SQLDialect(" + strconv.Itoa(int(d)) + ")"
}

// SQLTable is a table whose rows carry a fence column (see the package
// documentation). Its names are SQL identifiers (letters, digits and
// underscores, the table's optionally schema-qualified): nothing else is
// accepted. They are quoted in the statements, so a column may be named
// as a keyword ("order"); write them as the database stores them
// (PostgreSQL stores a name created unquoted in lower case).
type SQLTable struct {
	Dialect SQLDialect
	Table   string // e.g. "accounts" or "billing.accounts"
	ID      string // the column that identifies a row: the primary key or a unique column
	Fence   string // the fence column (default "fence")
}

// SQLDB is what the guarded writes run on: a *sql.DB, *sql.Tx or *sql.Conn.
type SQLDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (t SQLTable) fence() string {
	if t.Fence == "" {
		return "fence"
	}
	return t.Fence
}

// q quotes an identifier for the dialect (checked: no quote inside), so
// that a column named as a keyword ("order") is a column.
func (t SQLTable) q(name string) string {
	if t.Dialect == MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// table is the table's name, quoted part by part.
func (t SQLTable) table() string {
	schema, table, ok := strings.Cut(t.Table, ".")
	if !ok {
		return t.q(t.Table)
	}
	return t.q(schema) + "." + t.q(table)
}

// check validates the names, the database handle and the write before
// anything is sent.
func (t SQLTable) check(db SQLDB, fence int64, values map[string]any) error {
	if db == nil || reflect.ValueOf(db).Kind() == reflect.Pointer && reflect.ValueOf(db).IsNil() {
		return argerr.New("SQL table %q: nil database handle", t.Table)
	}
	if t.Dialect < Postgres || t.Dialect > SQLite {
		return argerr.New("SQL table %q: unknown dialect %v", t.Table, t.Dialect)
	}
	parts := strings.Split(t.Table, ".")
	if len(parts) > 2 || !identifier.MatchString(parts[0]) || !identifier.MatchString(parts[len(parts)-1]) {
		return argerr.New("SQL table name %q: letters, digits and underscores, optionally schema.table", t.Table)
	}
	for _, c := range []string{t.ID, t.fence()} {
		if !identifier.MatchString(c) {
			return argerr.New("SQL table %s: column name %q: letters, digits and underscores", t.Table, c)
		}
	}
	if strings.EqualFold(t.ID, t.fence()) {
		return argerr.New("SQL table %s: the ID and fence columns are both %q", t.Table, t.ID)
	}
	seen := make(map[string]string, len(values))
	for c := range values {
		if !identifier.MatchString(c) {
			return argerr.New("SQL table %s: column name %q: letters, digits and underscores", t.Table, c)
		}
		if strings.EqualFold(c, t.ID) || strings.EqualFold(c, t.fence()) {
			return argerr.New("SQL table %s: column %q is the guard's own, not a value to write", t.Table, c)
		}
		// MySQL and SQLite compare column names without case: two values
		// for one column would leave which lands to the map's order.
		if other, dup := seen[strings.ToLower(c)]; dup {
			return argerr.New("SQL table %s: columns %q and %q are one column", t.Table, other, c)
		}
		seen[strings.ToLower(c)] = c
	}
	if fence < 1 {
		return argerr.New("fence %d for table %s: fences start at 1 (0 is no lock's)", fence, t.Table)
	}
	return nil
}

// Check asks the database whether the table has its ID and fence columns,
// and whether the fence column holds fences as numbers. The error matches
// dlock.ErrInvalidArgument when it does not (with the database's words), or is
// the database's own when it cannot say. Call it once, at start.
func (t SQLTable) Check(ctx context.Context, db SQLDB) error {
	if ctx == nil {
		panic("guard: nil Context")
	}
	if err := t.check(db, 1, nil); err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT %s, %s FROM %s WHERE 1 = 0", t.q(t.ID), t.q(t.fence()), t.table()))
	if err != nil {
		if missing(err) && ctx.Err() == nil {
			return argerr.New("SQL table %s needs the columns %s and %s (a BIGINT fence): %v", t.Table, t.ID, t.fence(), err)
		}
		return fmt.Errorf("dlock: checking SQL table %s: %w", t.Table, err)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return err
	}
	if !holdsFences(t.Dialect, types[1]) {
		return argerr.New("SQL table %s: fence column %s is %s: it must be a BIGINT (or a NUMERIC of 19 digits or more, no fraction), compared as a number", t.Table, t.fence(), types[1].DatabaseTypeName())
	}
	return rows.Err()
}

// missing reports whether a database error says a table or column does
// not exist (PostgreSQL, MySQL/MariaDB and SQLite's words).
func missing(err error) bool {
	msg := strings.ToLower(err.Error())
	return slices.ContainsFunc([]string{"does not exist", "doesn't exist", "unknown column", "no such column", "no such table", "has no column"},
		func(s string) bool { return strings.Contains(msg, s) })
}

// holdsFences reports whether a column can hold every fence, compared as
// a number: a 64-bit integer, or a decimal of at least 19 digits without
// a fraction.
func holdsFences(d SQLDialect, c *sql.ColumnType) bool {
	typ := strings.ToUpper(strings.TrimSpace(c.DatabaseTypeName()))
	switch {
	case d == SQLite:
		return strings.Contains(typ, "INT") && !strings.ContainsAny(typ, "[(") // SQLite's integers are 64-bit
	case typ == "INT8", typ == "BIGINT", typ == "UNSIGNED BIGINT":
		return true
	case typ == "NUMERIC", typ == "DECIMAL":
		precision, scale, ok := c.DecimalSize()
		return !ok || precision >= 19 && scale == 0
	}
	return false
}

// statement builds SQL with the dialect's placeholders.
type statement struct {
	d    SQLDialect
	b    strings.Builder
	args []any
}

func (s *statement) sql(parts ...string) *statement {
	for _, p := range parts {
		s.b.WriteString(p)
	}
	return s
}

// arg writes a placeholder for v.
func (s *statement) arg(v any) *statement {
	s.args = append(s.args, v)
	if s.d == Postgres {
		s.b.WriteString("$" + strconv.Itoa(len(s.args)))
	} else {
		s.b.WriteString("?")
	}
	return s
}

// columns returns values' columns in a fixed order, so that a write's
// statement text is the same every time (drivers cache prepared statements
// by text).
func columns(values map[string]any) []string {
	cs := make([]string, 0, len(values))
	for c := range values {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return cs
}

// Update sets values on the row id, and its fence to fence, if the row's
// fence is at most fence. The error matches ErrStaleFence (a
// *StaleFenceError) when the row has a higher fence, sql.ErrNoRows when
// there is no such row, dlock.ErrInvalidArgument for a bad name, a fence below 1
// or (outside a transaction) a table without the ID or fence column, as
// Check says; otherwise it wraps the database's.
func (t SQLTable) Update(ctx context.Context, db SQLDB, fence int64, id any, values map[string]any) error {
	if err := t.check(db, fence, values); err != nil {
		return err
	}
	s := &statement{d: t.Dialect}
	f := t.q(t.fence())
	s.sql("UPDATE ", t.table(), " SET ")
	for _, c := range columns(values) {
		s.sql(t.q(c), " = ").arg(values[c]).sql(", ")
	}
	s.sql(f, " = ").arg(fence).sql(" WHERE ", t.q(t.ID), " = ").arg(id).sql(" AND COALESCE(", f, ", 0) <= ").arg(fence)
	return t.exec(ctx, db, s, fence, id, true, values)
}

// Upsert inserts the row id with values and fence, or, when it exists,
// updates it as Update does. Errors as for Update (never sql.ErrNoRows).
func (t SQLTable) Upsert(ctx context.Context, db SQLDB, fence int64, id any, values map[string]any) error {
	if err := t.check(db, fence, values); err != nil {
		return err
	}
	if t.Dialect == MySQL {
		return t.upsertMySQL(ctx, db, fence, id, values)
	}
	cs := columns(values)
	s := t.insert(id, cs, values, fence)
	row, f := t.table(), t.q(t.fence())
	if t.Dialect == Postgres {
		row = "dlock_row" // the existing row, apart from EXCLUDED (insert names the alias)
	}
	s.sql(" ON CONFLICT (", t.q(t.ID), ") DO UPDATE SET ")
	for _, c := range cs {
		s.sql(t.q(c), " = EXCLUDED.", t.q(c), ", ")
	}
	s.sql(f, " = EXCLUDED.", f, " WHERE COALESCE(", row, ".", f, ", 0) <= EXCLUDED.", f)
	return t.exec(ctx, db, s, fence, id, false, values)
}

// insert builds the INSERT of the row id (PostgreSQL: with the alias
// dlock_row for the existing row).
func (t SQLTable) insert(id any, cs []string, values map[string]any, fence int64) *statement {
	s := &statement{d: t.Dialect}
	alias := ""
	if t.Dialect == Postgres {
		alias = " AS dlock_row"
	}
	s.sql("INSERT INTO ", t.table(), alias, " (", t.q(t.ID))
	for _, c := range cs {
		s.sql(", ", t.q(c))
	}
	s.sql(", ", t.q(t.fence()), ") VALUES (").arg(id)
	for _, c := range cs {
		s.sql(", ").arg(values[c])
	}
	return s.sql(", ").arg(fence).sql(")")
}

// upsertMySQL is Upsert where INSERT … ON DUPLICATE KEY UPDATE would fire
// on any unique key, not only ID (and so could overwrite another row), and
// counts rows as the connection's clientFoundRows says: the guarded UPDATE
// first; if no row has the ID, an INSERT, which only ever creates a row;
// if that meets a row with the ID after all (inserted meanwhile by another
// writer), the UPDATE again, whose fence condition decides. A duplicate on
// another unique key is the database's error.
func (t SQLTable) upsertMySQL(ctx context.Context, db SQLDB, fence int64, id any, values map[string]any) error {
	for attempt := 0; ; attempt++ {
		err := t.Update(ctx, db, fence, id, values)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		s := t.insert(id, columns(values), values, fence)
		_, err = db.ExecContext(ctx, s.b.String(), s.args...)
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "Duplicate entry") || attempt == 2 {
			return t.explain(ctx, db, err)
		}
		var one int
		q := (&statement{d: t.Dialect}).sql("SELECT 1 FROM ", t.table(), " WHERE ", t.q(t.ID), " = ").arg(id).sql(" FOR UPDATE")
		if qerr := db.QueryRowContext(ctx, q.b.String(), q.args...).Scan(&one); qerr != nil {
			return fmt.Errorf("dlock: guarded write to %s: %w", t.Table, err) // another unique key
		}
	}
}

// exec runs a guarded write. No row affected means, when the statement
// ran: refused for a higher fence, no such row, or (MySQL, which by
// default counts changed rows) the same values written again. The row as
// it is now tells which, except that a row with a fence at most ours may
// also have been inserted since by another writer: then the write did not
// land, and the statement runs again (a few times at most).
func (t SQLTable) exec(ctx context.Context, db SQLDB, s *statement, fence int64, id any, update bool, values map[string]any) error {
	for attempt := 0; ; attempt++ {
		res, err := db.ExecContext(ctx, s.b.String(), s.args...)
		if err != nil {
			return t.explain(ctx, db, err)
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		var highest sql.NullInt64
		var same bool
		err = t.reread(ctx, db, id, values).Scan(&highest, &same)
		switch {
		case errors.Is(err, sql.ErrNoRows) && update:
			return fmt.Errorf("dlock: guarded update of %s: no row %s = %v: %w", t.Table, t.ID, id, err)
		case err != nil:
			return fmt.Errorf("dlock: guarded write to %s: %w", t.Table, err)
		case highest.Int64 > fence:
			return &StaleFenceError{Resource: fmt.Sprintf("%s %s=%v", t.Table, t.ID, id), Fence: fence, Highest: highest.Int64}
		case t.Dialect == MySQL && same && highest.Int64 == fence:
			return nil // written before with these very values
		case attempt == 2:
			return fmt.Errorf("dlock: guarded write to %s %s=%v: the row kept changing under it", t.Table, t.ID, id)
		}
	}
}

// reread selects the row's fence and, on MySQL, whether it already holds
// values (null-safe equality), for exec. On MySQL it is a locking read,
// which sees the newest row, as the UPDATE did, not a REPEATABLE READ
// transaction's snapshot.
func (t SQLTable) reread(ctx context.Context, db SQLDB, id any, values map[string]any) *sql.Row {
	q := &statement{d: t.Dialect}
	q.sql("SELECT ", t.q(t.fence()), ", ")
	if t.Dialect != MySQL || len(values) == 0 {
		q.sql("1 = 1")
	}
	for i, c := range columns(values) {
		if t.Dialect != MySQL {
			break
		}
		if i > 0 {
			q.sql(" AND ")
		}
		q.sql("(", t.q(c), " <=> ").arg(values[c]).sql(")")
	}
	q.sql(" FROM ", t.table(), " WHERE ", t.q(t.ID), " = ").arg(id)
	if t.Dialect == MySQL {
		q.sql(" FOR UPDATE")
	}
	return db.QueryRowContext(ctx, q.b.String(), q.args...)
}

// explain returns a failed write's error, as Check's when it says a table
// or column is missing and Check finds the table lacks the guard's columns
// (asked outside a transaction only: a failed statement aborts a
// PostgreSQL transaction).
func (t SQLTable) explain(ctx context.Context, db SQLDB, err error) error {
	if _, tx := db.(*sql.Tx); !tx && missing(err) && ctx.Err() == nil {
		if cerr := t.Check(ctx, db); errors.Is(cerr, argerr.Err) {
			return cerr
		}
	}
	return fmt.Errorf("dlock: guarded write to %s: %w", t.Table, err)
}
