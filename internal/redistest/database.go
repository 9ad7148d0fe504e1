package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Database is a PostgreSQL or MariaDB server process the tests started on
// a free loopback port, with its data in a temporary directory. Its
// superuser needs no password on loopback: DSN reaches its default
// database as that user.
type Database struct {
	Kind string // "postgres" or "mariadb"
	Port int
	Dir  string
	// DSN is the data source name for the Go driver of the kind:
	// pgx's for PostgreSQL, go-sql-driver/mysql's for MariaDB.
	DSN string

	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
}

// StartPostgres starts a PostgreSQL server for tb, stopped when tb ends;
// it skips tb, saying why, when PostgreSQL is not installed (`make test`
// installs it).
func StartPostgres(tb testing.TB) *Database {
	tb.Helper()
	return startDatabase(tb, "postgres", spawnPostgres)
}

// StartMariaDB starts a MariaDB server for tb, stopped when tb ends; it
// skips tb when MariaDB is not installed (`make test` installs it).
func StartMariaDB(tb testing.TB) *Database {
	tb.Helper()
	return startDatabase(tb, "mariadb", spawnMariaDB)
}

// errNotInstalled marks a database whose programs are missing.
type errNotInstalled struct{ what string }

func (e errNotInstalled) Error() string {
	return e.what + " is not installed (`make test` installs it from Debian's packages)"
}

func startDatabase(tb testing.TB, kind string, spawn func(dir string, port int) (*Database, error)) *Database {
	tb.Helper()
	dir, err := os.MkdirTemp("", "dbtest-"+kind+"-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	var db *Database
	for attempt := 0; attempt < 3; attempt++ {
		port, perr := freePort()
		if perr != nil {
			err = perr
			continue
		}
		if db, err = spawn(dir, port); err == nil {
			break
		}
		if _, missing := err.(errNotInstalled); missing {
			os.RemoveAll(dir)
			if os.Getenv("DLOCK_REQUIRE_DATABASES") != "" {
				tb.Fatalf("redistest: %v", err)
			}
			tb.Skipf("redistest: %v", err)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatalf("redistest: starting %s: %v", kind, err)
	}
	tb.Cleanup(func() { db.Close(); os.RemoveAll(dir) })
	return db
}

// Close stops the server (SIGTERM, then SIGKILL after 10 s).
func (d *Database) Close() {
	d.once.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	})
}

// run starts the server and waits until its port accepts connections and
// its log says it serves (ready, a phrase of the log).
func (d *Database) run(cmd *exec.Cmd, ready string) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = sysProcAttr()
	}
	log, err := os.Create(filepath.Join(d.Dir, "server.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	d.cmd, d.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-d.exited:
			out, _ := os.ReadFile(filepath.Join(d.Dir, "server.log"))
			return fmt.Errorf("%s exited at start:\n%s", d.Kind, tail(out, 2000))
		default:
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(d.Port), time.Second); err == nil {
			c.Close()
			if out, _ := os.ReadFile(filepath.Join(d.Dir, "server.log")); strings.Contains(string(out), ready) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			d.Close()
			return fmt.Errorf("%s on port %d not ready after a minute", d.Kind, d.Port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// asUnprivileged makes cmd run as the user "nobody" when this process is
// root: PostgreSQL refuses to run as root.
func asUnprivileged(cmd *exec.Cmd, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		return err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = sysProcAttr()
	}
	cmd.SysProcAttr = runAs(cmd.SysProcAttr, uid, gid)
	return nil
}

// postgresBin finds a PostgreSQL program: on PATH, or in Debian's
// versioned directory.
func postgresBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", errNotInstalled{"PostgreSQL (" + name + ")"}
	}
	return matches[len(matches)-1], nil
}

func spawnPostgres(dir string, port int) (*Database, error) {
	initdb, err := postgresBin("initdb")
	if err != nil {
		return nil, err
	}
	server, err := postgresBin("postgres")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(data); err != nil {
		if err := os.Mkdir(data, 0o700); err != nil {
			return nil, err
		}
		init := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
		if err := asUnprivileged(init, dir); err != nil {
			return nil, err
		}
		if out, err := init.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb: %v\n%s", err, tail(out, 2000))
		}
	}
	d := &Database{Kind: "postgres", Port: port, Dir: dir,
		DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	cmd := exec.Command(server, "-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+dir, "-c", "fsync=off", "-c", "max_connections=200")
	if err := asUnprivileged(cmd, dir); err != nil {
		return nil, err
	}
	return d, d.run(cmd, "ready to accept connections")
}

func spawnMariaDB(dir string, port int) (*Database, error) {
	server, err := exec.LookPath("mariadbd")
	if err != nil {
		if server, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			return nil, errNotInstalled{"MariaDB (mariadbd)"}
		}
	}
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		return nil, errNotInstalled{"MariaDB (mariadb-install-db)"}
	}
	data := filepath.Join(dir, "data")
	userArgs := []string{}
	if os.Geteuid() == 0 {
		userArgs = []string{"--user=root"}
	}
	if _, err := os.Stat(data); err != nil {
		args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}, userArgs...)
		if out, err := exec.Command(install, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, tail(out, 2000))
		}
	}
	d := &Database{Kind: "mariadb", Port: port, Dir: dir,
		DSN: fmt.Sprintf("root@tcp(127.0.0.1:%d)/mysql", port)}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "mariadb.sock"), "--pid-file=" + filepath.Join(dir, "mariadb.pid"),
		"--skip-grant-tables", "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0", "--max-connections=200"}, userArgs...)
	return d, d.run(exec.Command(server, args...), "ready for connections")
}
