// Package sqltest tests dlock's fenced SQL writes (SQLTable) against real
// PostgreSQL and MariaDB servers, which it starts through redistest, and
// SQLite through a pure-Go driver. It is a module of its own so that the
// library's module needs no database driver.
package sqltest
