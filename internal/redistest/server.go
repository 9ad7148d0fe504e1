// Package redistest starts and controls real redis-server processes on
// loopback for dlock's tests: standalone servers, master/replica pairs and
// small clusters, with stop, kill, restart and pause (SIGSTOP/SIGCONT).
//
// Every server listens on 127.0.0.1 on a free port, keeps its files in a
// temporary directory, and is stopped when the test (or the process that
// spawned it) ends. The redis-server binary is taken from $REDIS_SERVER, or
// from PATH; `make test` installs it when it is missing.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING after start.
const startTimeout = 15 * time.Second

// Server is one redis-server process.
type Server struct {
	Port int         // the loopback port it listens on
	Dir  string      // working directory: logs, RDB/AOF files, cluster config
	args []string    // extra configuration, as redis-server command-line options
	TLS  *tls.Config // when set, the server speaks only TLS on Port
	// sentinelConf, when set, makes the process a Sentinel with this
	// configuration file (sentinel.go).
	sentinelConf string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Binary returns the redis-server executable to run.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server not found on PATH (run `make test`, which installs it, or set REDIS_SERVER): %w", err)
	}
	return p, nil
}

// Spawn starts a redis-server with the given extra options (e.g.
// "--appendonly", "yes") in a new temporary directory, and waits until it
// answers. The caller must Close it.
func Spawn(args ...string) (*Server, error) { return spawn(&Server{args: args}, "redistest-") }

// SpawnTLS starts a redis-server that speaks only TLS on its port, with the
// given certificate and key files; clientTLS is what clients (and the
// readiness check) use to connect.
func SpawnTLS(clientTLS *tls.Config, certFile, keyFile string, args ...string) (*Server, error) {
	return spawn(&Server{TLS: clientTLS, args: append([]string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"}, args...)}, "redistest-")
}

// spawn starts s (its options, TLS, Sentinel configuration set; Port
// filled in here, and Dir when empty: a new temporary directory named with
// prefix) on a free port, trying a few ports.
func spawn(s *Server, prefix string) (*Server, error) {
	if s.Dir == "" {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			return nil, err
		}
		s.Dir = dir
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s.Port = port
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(s.Dir)
	return nil, lastErr
}

// Start is Spawn for tests: it fails the test on error and closes the
// server when the test ends.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := Spawn(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Pid is the process id of the running redis-server, 0 when none runs.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Options returns go-redis options for the server, with short timeouts that
// suit tests against loopback.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:            s.Addr(),
		DialTimeout:     2 * time.Second,
		ReadTimeout:     2 * time.Second,
		WriteTimeout:    2 * time.Second,
		MaxRetries:      -1, // tests control failures; no hidden retries
		DisableIdentity: true,
		TLSConfig:       s.TLS,
	}
}

// Client returns a new go-redis client for the server, closed when the test
// ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

func (s *Server) start() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	ports := []string{"--port", strconv.Itoa(s.Port)}
	if s.TLS != nil {
		ports = []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port)}
	}
	if s.sentinelConf != "" {
		ports = append([]string{s.sentinelConf, "--sentinel"}, ports...)
	}
	args := append(append(ports,
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "redis.log",
		"--repl-diskless-sync-delay", "0", // replicas sync at once, not after 5 s
	), s.args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitReady(exited); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) waitReady(exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, MaxRetries: -1, DisableIdentity: true, TLSConfig: s.TLS})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server on port %d exited at start:\n%s", s.Port, tail(log, 2000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		var reply redis.Error
		if err == nil || errors.As(err, &reply) { // an answer, even NOAUTH, means it is up
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on port %d not ready after %v: %w", s.Port, startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// signal sends sig to the running process, if any.
func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

func (s *Server) wait() {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it. Unsaved data is lost.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	s.wait()
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it. With
// "--save" configured it writes its RDB file first.
func (s *Server) Stop() {
	s.signal(sigCont) // a paused server cannot act on SIGTERM
	s.signal(syscall.SIGTERM)
	s.wait()
}

// Restart starts the server again on the same port, directory and options,
// after Kill or Stop.
func (s *Server) Restart() error {
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers
// nothing, as a server in a long fork or swap storm would.
func (s *Server) Pause() { s.signal(sigStop) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(sigCont) }

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	os.RemoveAll(s.Dir)
}

// freePort returns a loopback port that is free now, with port+10000 (the
// cluster bus port) free too. Both lie below Linux's ephemeral range
// (32768 up): a server killed and restarted on its port found it taken by
// a client's outgoing connection (a dial to the dead port that connected
// to itself), and the restart failed.
func freePort() (int, error) {
	for i := 0; i < 100; i++ {
		port := 10000 + rand.IntN(12768)
		if isFree(port) && isFree(port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free loopback port found")
}

func isFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
