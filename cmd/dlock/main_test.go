package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The tests build the real binary and run it as a user would, against a
// real redis-server.
var (
	bin    string
	server *redistest.Server
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dlock-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "dlock")
	// The race detector's runtime sleeps a second before every exit of the
	// binary built with -race (atexit_sleep_ms): not what a test measures.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	if out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building dlock: %v\n%s", err, out)
		os.Exit(1)
	}
	if server, err = redistest.Spawn(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	server.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

func serverURL() string { return "redis://" + server.Addr() }

func key(t *testing.T) string { return fmt.Sprintf("cli:%s:%d", t.Name(), rand.Uint32()) }

// dlockCmd returns the binary with args, with $DLOCK_REDIS pointing at the
// test server.
func dlockCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DLOCK_REDIS="+serverURL())
	return cmd
}

// run runs the binary to completion and returns its exit code and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := dlockCmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func rdb(t *testing.T) *redis.Client { return server.Client(t) }

func TestConcurrentRunsNeverInterleave(t *testing.T) {
	k := key(t)
	file := filepath.Join(t.TempDir(), "log")
	script := fmt.Sprintf("echo start >> %s; sleep 0.05; echo end >> %s", file, file)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, stderr := run(t, "run", "--key", k, "--", "sh", "-c", script); code != 0 {
				t.Errorf("dlock run exited %d: %s", code, stderr)
			}
		}()
	}
	wg.Wait()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	if len(lines) != 12 {
		t.Fatalf("%d lines, want 12: %q", len(lines), lines)
	}
	for i, l := range lines {
		if want := []string{"start", "end"}[i%2]; l != want {
			t.Fatalf("line %d is %q, want %q: runs interleaved: %q", i, l, want, lines)
		}
	}
}

func TestRunPassesTheCommandsExitCodeAndEnvironment(t *testing.T) {
	k := key(t)
	if code, _, _ := run(t, "run", "--key", k, "--", "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit code %d, want the command's 7", code)
	}
	check := `test "$DLOCK_KEY" = "` + k + `" && test "$DLOCK_FENCE" -gt 0 && test ${#DLOCK_TOKEN} -ge 22`
	if code, _, stderr := run(t, "run", "--key", k, "--", "sh", "-c", check); code != 0 {
		t.Errorf("environment check failed (%d): %s", code, stderr)
	}
	if code, _, _ := run(t, "run", "--key", k, "--", "sh", "-c", "kill -KILL $$"); code != 128+9 {
		t.Errorf("killed command: exit %d, want 137", code)
	}
	if code, _, _ := run(t, "run", "--key", k, "--", "/no/such/command"); code != 127 {
		t.Errorf("missing command: exit %d, want 127", code)
	}
	if rdb(t).Exists(context.Background(), k).Val() != 0 {
		t.Error("the lock is still held after the runs")
	}
}

func TestRunWithWaitZeroFailsFastOnAHeldKey(t *testing.T) {
	k := key(t)
	c := dlock.New(rdb(t))
	defer c.Close()
	l, err := c.TryLock(context.Background(), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	code, _, stderr := run(t, "run", "--key", k, "--wait", "0", "--", "true")
	if code != exitConflict || !strings.Contains(stderr, "held by someone else") {
		t.Fatalf("exit %d (%q), want %d", code, stderr, exitConflict)
	}
	if code, _, _ := run(t, "run", "--key", k, "--wait", "0", "--conflict-exit-code", "9", "--", "true"); code != 9 {
		t.Fatalf("with --conflict-exit-code 9: exit %d", code)
	}
	if code, _, _ := run(t, "run", "--key", k, "--wait", "200ms", "--", "true"); code != exitConflict {
		t.Fatalf("with --wait 200ms: exit %d", code)
	}
}

// runHolding starts `dlock run --key k` with args, waits until it holds
// k, and returns a channel of its end and its stderr.
func runHolding(t *testing.T, k string, args ...string) (<-chan error, *bytes.Buffer) {
	t.Helper()
	cmd := dlockCmd(append([]string{"run", "--key", k}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r, deadline := rdb(t), time.Now().Add(20*time.Second)
	for r.Exists(context.Background(), k).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("dlock run never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return done, &stderr
}

// exitsLost waits for a run's end, which must be exit 76 (lost) within 45 s.
func exitsLost(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
			t.Fatalf("dlock run ended with %v, want exit %d", err, exitLost)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the command kept running after the lock was lost")
	}
}

func TestALostLockKillsTheCommand(t *testing.T) {
	k := key(t)
	done, stderr := runHolding(t, k, "--ttl", "600ms", "--kill-after", "2s", "--", "sleep", "60")
	r, ctx := rdb(t), context.Background()
	r.Set(ctx, k, "someone-else", time.Minute) // the lock is taken away
	exitsLost(t, done)
	if !strings.Contains(stderr.String(), "lost") {
		t.Errorf("stderr does not say the lock was lost: %q", stderr.String())
	}
	if got := r.Get(ctx, k).Val(); got != "someone-else" {
		t.Errorf("the new holder's key became %q", got)
	}
}

func TestSignalsAreForwardedAndTheLockReleasedAfter(t *testing.T) {
	k := key(t)
	cmd := dlockCmd("run", "--key", k, "--", "sh", "-c", `trap 'exit 3' TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("child said %q", line)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("dlock run ended with %v, want the child's exit 3 after its TERM trap", err)
	}
	if rdb(t).Exists(context.Background(), k).Val() != 0 {
		t.Fatal("the lock was not released after the child exited")
	}
}

func TestLockToolsForShellScripts(t *testing.T) {
	k := key(t)
	code, out, stderr := run(t, "lock", "--key", k, "--ttl", "1m")
	if code != 0 {
		t.Fatalf("lock: exit %d: %s", code, stderr)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, value, _ := strings.Cut(line, "=")
		vars[name] = value
	}
	token := vars["DLOCK_TOKEN"]
	if token == "" || vars["DLOCK_FENCE"] == "" || vars["DLOCK_KEY"] != "'"+k+"'" {
		t.Fatalf("lock printed %q", out)
	}
	if code, _, _ := run(t, "lock", "--key", k); code != exitConflict {
		t.Fatalf("second lock: exit %d, want %d", code, exitConflict)
	}
	code, out, _ = run(t, "status", "--json", k)
	var st statusResult
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || !st.Held || st.Fence == 0 || strings.Contains(out, token) {
		t.Fatalf("status: exit %d, %q (%v)", code, out, err)
	}
	if code, _, stderr := run(t, "extend", "--key", k, "--token", token, "--ttl", "2m"); code != 0 {
		t.Fatalf("extend: exit %d: %s", code, stderr)
	}
	if pttl := rdb(t).PTTL(context.Background(), k).Val(); pttl <= time.Minute {
		t.Fatalf("PTTL after extend %v", pttl)
	}
	if code, _, _ := run(t, "extend", "--key", k, "--token", "wrong", "--ttl", "2m"); code != exitLost {
		t.Fatalf("extend with a wrong token: exit %d, want %d", code, exitLost)
	}
	code, out, _ = run(t, "unlock", "--key", k, "--token", token, "--json")
	var res lockResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Result != "released" {
		t.Fatalf("unlock: exit %d, %q", code, out)
	}
	if code, _, _ := run(t, "unlock", "--key", k, "--token", token); code != exitLost {
		t.Fatalf("second unlock: exit %d, want %d", code, exitLost)
	}
	if code, out, _ := run(t, "status", k); code != exitFree || !strings.Contains(out, "free") {
		t.Fatalf("status after unlock: exit %d, %q", code, out)
	}
}

func TestPasswordsAreNeverEchoed(t *testing.T) {
	for _, u := range []string{"redis://user:s3cret@127.0.0.1:1/0", "redis://:s3cret@127.0.0.1:1/notadb"} {
		code, out, stderr := run(t, "status", "--redis", u, "k")
		if code == 0 || strings.Contains(out+stderr, "s3cret") {
			t.Errorf("status with %s: exit %d, output %q", u, code, out+stderr)
		}
	}
}

func TestBadInputIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--", "true"},
		{"run", "--key", "k"},
		{"run", "--key", "k", "--ttl", "1ms", "--", "true"},
		{"run", "--key", "k", "--wait", "-1s", "--", "true"},
		{"run", "--key", "k", "--ttl", "soon", "--", "true"},
		{"lock"},
		{"lock", "--key", ""},
		{"unlock", "--key", "k"},
		{"extend", "--key", "k", "--token", "t"},
		{"status"},
		{"status", ""},
		{"status", "dlock:fence:x"}, // dlock's own keys are not locks
		{"leader", ""},
		{"leader", "dlock:x"},
		{"lock", "--key", "k", "--conflict-exit-code", "300"}, // an exit status is 0-255
		{"run", "--key", "k", "--conflict-exit-code", "-1", "--", "true"},
		{"nonsense"},
	} {
		cmd := dlockCmd(args...)
		cmd.Env = append(cmd.Env, "DLOCK_KEY=", "DLOCK_TOKEN=")
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
			t.Errorf("dlock %q: %v, want exit %d", args, err, exitUsage)
		}
	}
}

func TestEverySubcommandHasHelpWithExamples(t *testing.T) {
	for _, c := range commands {
		code, out, _ := run(t, c.name, "--help")
		if code != 0 || !strings.Contains(out, "Examples") || !strings.Contains(out, "Usage: dlock "+c.name) {
			t.Errorf("dlock %s --help: exit %d, %q", c.name, code, out)
		}
	}
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "Exit codes") {
		t.Errorf("dlock help: exit %d, %q", code, out)
	}
}

func TestDemoPassesWithNoRedisConfigured(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	cmd := exec.Command(bin, "demo")
	cmd.Env = append(os.Environ(), "DLOCK_REDIS=", "COLUMNS=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "all experiments passed") || strings.Contains(string(out), "FAIL") {
		t.Fatalf("dlock demo: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("a demo line is %d columns wide: %q", n, line)
		}
	}
	if !strings.Contains(string(out), "the Redis guidance") || !strings.Contains(string(out), "the unsafe way broke, as expected") {
		t.Errorf("the demo does not explain its references or its mistake rows:\n%s", out)
	}
}

// A wrong password is said once, with exit 69, not as a row of failures.
func TestDemoWithAWrongPasswordSaysSoOnce(t *testing.T) {
	s := redistest.Start(t, "--requirepass", "right")
	code, out, stderr := run(t, "demo", "--redis", "redis://:wrong@"+s.Addr(), "--spawn=false")
	if code != exitRedis || strings.Contains(out, "FAIL") || strings.Count(stderr, "\n") != 1 || strings.Contains(out+stderr, ":wrong@") {
		t.Fatalf("demo with a wrong password: exit %d\n%s%s", code, out, stderr)
	}
}

func TestDemoAgainstARealServer(t *testing.T) {
	code, out, stderr := run(t, "demo", "--redis", serverURL(), "--spawn=false")
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("dlock demo --redis: exit %d\n%s%s", code, out, stderr)
	}
}

func TestLsListsMatchingLocksWithWaiters(t *testing.T) {
	prefix := fmt.Sprintf("ls%d:", rand.Uint32())
	c := dlock.New(rdb(t))
	defer c.Close()
	ctx := context.Background()
	held, err := c.TryLock(ctx, prefix+"a", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	waiter := dlock.New(rdb(t))
	defer waiter.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go waiter.Lock(wctx, prefix+"a")
	rdb(t).HSet(ctx, prefix+"hash", "f", "v") // matches, but is no lock
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, stderr := run(t, "ls", "--json", prefix+"*")
		if code != 0 {
			t.Fatalf("ls: exit %d: %s", code, stderr)
		}
		var st statusResult
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &st); err == nil && st.Key == prefix+"a" && st.Held && st.Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ls never showed the held lock with its waiter: %q", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, _ := run(t, "status", prefix+"a"); code != 0 || !strings.Contains(out, "1 waiting") {
		t.Fatalf("status: %d %q", code, out)
	}
}

func TestRunServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	k := key(t)
	cmd := dlockCmd("run", "--key", k, "--metrics-addr", addr, "--", "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `dlock_acquires_total{lock="`+k+`",primitive="lock",result="obtained"} 1`) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no acquire metric at %s (last error %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRedissURLWithPasswordWorksAndIsNotEchoed(t *testing.T) {
	s, certFile := redistest.StartTLS(t, "--requirepass", "s3cretpw")
	u := "rediss://:s3cretpw@" + s.Addr() + "/0"
	k := key(t)
	cmd := exec.Command(bin, "run", "--redis", u, "--key", k, "--", "sh", "-c", "exit 0")
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+certFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dlock run over rediss://: %v\n%s", err, out)
	}
	bad := exec.Command(bin, "status", "--redis", "rediss://:wrongpw0@"+s.Addr()+"/0", k)
	bad.Env = cmd.Env
	out, err := bad.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitRedis || strings.Contains(string(out), "wrongpw0") {
		t.Fatalf("status with a wrong password: %v\n%s", err, out)
	}
}

// With Redlock, a wait that runs out while too few nodes answer is a Redis
// failure (69), not contention (75), and the wait itself is reported on
// stderr while it lasts.
func TestRedlockWaitWithoutAMajorityIsUnavailable(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	nodes, args := redlockNodes(t, 3)
	nodes[0].Pause()
	defer nodes[0].Resume()
	nodes[2].Pause()
	defer nodes[2].Resume()
	args = append([]string{"run", "--key", key(t), "--wait", "1s", "--node-timeout", "100ms"}, args...)
	code, _, stderr := run(t, append(args, "--", "true")...)
	if code != exitRedis || !strings.Contains(stderr, "no majority") {
		t.Fatalf("exit %d (%q), want %d and a word on the majority", code, stderr, exitRedis)
	}
	if !strings.Contains(stderr, "waiting for a majority of nodes") {
		t.Fatalf("the wait for slow nodes was not reported while it lasted: %q", stderr)
	}
}

// A URL that does not parse is a usage error that says what is wrong and
// masks the password, on every subcommand that takes one, through --redis
// and $DLOCK_REDIS alike.
func TestUnparsableURLsNeverShowThePassword(t *testing.T) {
	for _, u := range []string{
		"redis://:s3cr3tPW@127.0.0.1:6379 ", // a pasted trailing space
		"redis://:s3cr3tPW@127.0.0.1:notaport",
		"redis://:s3cr3tPW@127.0.0.1:6379/%ZZ",
		"redis://:s3cr3tPW@[::1",
		"redis://user:s3cr3tPW@127.0.0.1:6379/x",
		"redis://:s3cr3tPW",                                     // "@host" missing: the password reads as a port
		"redis://u:s3cr3tPW@127.0.0.1:6379/0?password=s3cr3tPW", // a query parameter go-redis refuses
		"redis://u:pw@127.0.0.1:6379/0?p%61ssword=s3cr3tPW",     // named with an escape
		"redis://:s3cr3tPW:1234",                                // parses, but its host is the password
		"redis://:87654321",                                     // all digits, and no port
		"redis://:hun#s3cr3tPW",
		"redis://:s3cr3tPW/x@127.0.0.1:6379/0",     // read by the parser as a port, "s3cr3tPW"
		"redis://127.0.0.1:6379,redis://:s3cr3tPW", // a list given as one URL
	} {
		for _, args := range [][]string{
			{"status", "k"}, {"lock", "--key", "k"}, {"lock", "--json", "--key", "k"}, {"run", "--key", "k", "--", "true"},
		} {
			for _, viaEnv := range []bool{false, true} {
				if viaEnv && strings.TrimSpace(u) != u {
					continue // $DLOCK_REDIS is split at commas and trimmed: that one parses
				}
				cmd := dlockCmd(args...)
				if viaEnv {
					cmd.Env = append(cmd.Env, "DLOCK_REDIS="+u)
				} else {
					cmd.Args = append(cmd.Args[:2], append([]string{"--redis", u}, cmd.Args[2:]...)...)
				}
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != exitUsage {
					t.Errorf("%q %q: %v, want exit %d", u, args, err, exitUsage)
				}
				if strings.Contains(out.String(), "s3cr3tPW") || strings.Contains(out.String(), "87654321") || !strings.Contains(out.String(), "xxxxx") {
					t.Errorf("%q %q: output %q shows the password or not the masked URL", u, args, out.String())
				}
			}
		}
	}
	code, _, stderr := run(t, "status", "--redis", "127.0.0.1:6379", "k")
	if code != exitUsage || !strings.Contains(stderr, "redis://127.0.0.1:6379") {
		t.Errorf("a URL without scheme: exit %d, %q; want a usage error suggesting redis://", code, stderr)
	}
}

// --json never reports a broken server as a held lock, and a refused
// connection warns of no grant to give back.
func TestJSONSaysRedisIsUnavailable(t *testing.T) {
	code, out, stderr := run(t, "lock", "--json", "--key", key(t), "--redis", "redis://127.0.0.1:1")
	if code != exitRedis || !strings.Contains(out, `"result":"unavailable"`) {
		t.Errorf("lock --json on a refused connection: exit %d, %q", code, out)
	}
	if strings.Contains(stderr, "give back") {
		t.Errorf("a refused connection warned of a grant to give back: %q", stderr)
	}
}

// Flags may come after the key, as users type them; a database number the
// server does not have is a usage error.
func TestFlagsAfterTheKeyAndABadDatabase(t *testing.T) {
	k := key(t)
	if code, out, stderr := run(t, "status", k, "--json", "--redis", serverURL()); code != exitFree || !strings.Contains(out, `"held":false`) {
		t.Errorf("status KEY --json --redis URL: exit %d, %q %q", code, out, stderr)
	}
	if code, _, stderr := run(t, "ls", "cli:*", "--redis", serverURL()); code != exitOK {
		t.Errorf("ls PATTERN --redis URL: exit %d, %q", code, stderr)
	}
	if code, _, stderr := run(t, "status", k, "--redis", serverURL()+"/99"); code != exitUsage || !strings.Contains(stderr, "database") {
		t.Errorf("status on database 99: exit %d, %q; want a usage error", code, stderr)
	}
	// Refused at the connection's setup, the lock script never ran: there
	// is no grant to give back, and no warning about one.
	if code, _, stderr := run(t, "lock", "--key", k, "--redis", serverURL()+"/99"); code != exitUsage || strings.Contains(stderr, "give back") {
		t.Errorf("lock on database 99: exit %d, %q; want a usage error alone", code, stderr)
	}
	if code, _, stderr := run(t, "lock", "--key", k, "--ttl", "10"); code != exitUsage || !strings.Contains(stderr, "unit") {
		t.Errorf("--ttl 10: exit %d, %q; want a usage error that asks for a unit", code, stderr)
	}
	if _, _, stderr := run(t, "status", "--bogus", k); strings.Count(stderr, "\n") > 3 || !strings.Contains(stderr, "--help") {
		t.Errorf("a bad flag printed %q, want its error and a hint to --help", stderr)
	}
}

// kill -9 of dlock run kills the command, and what it started, with it: no
// copy of it goes on running without the lock.
func TestRunKilledOutrightTakesItsCommandWithIt(t *testing.T) {
	if !guarded {
		t.Skip("no parent-death signal on this system")
	}
	k := key(t)
	pidFile := t.TempDir() + "/pids"
	cmd := dlockCmd("run", "--key", k, "--ttl", "3s", "--", "sh", "-c", `sleep 60 & echo $! > `+pidFile+`.tmp; echo $$ >> `+pidFile+`.tmp; mv `+pidFile+`.tmp `+pidFile+`; wait`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	deadline := time.Now().Add(20 * time.Second)
	for len(pids) < 2 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the command never started")
		}
		data, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, pid := range pids {
		deadline := time.Now().Add(20 * time.Second)
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("process %d of the command outlived the killed dlock", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// dlock ls with one Redlock node down lists what the others hold and names
// the node that did not answer.
func TestLsWithARedlockNodeDown(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	nodes, urls := redlockNodes(t, 3)
	k := key(t)
	lock := append([]string{"lock", "--key", k, "--ttl", "1m"}, urls...)
	if code, _, stderr := run(t, lock...); code != exitOK {
		t.Fatalf("lock: exit %d, %q", code, stderr)
	}
	nodes[1].Kill()
	code, out, stderr := run(t, append([]string{"ls", "cli:*"}, urls...)...)
	if code != exitOK || !strings.Contains(out, k) || !strings.Contains(out, "held") {
		t.Fatalf("ls with a node down: exit %d, %q, %q; want the lock listed", code, out, stderr)
	}
	if !strings.Contains(stderr, nodes[1].Addr()) {
		t.Fatalf("ls did not name the node that did not answer: %q", stderr)
	}
}

// A key that holds something other than a lock is said to, not quoted as a
// script's error.
func TestStatusOfAKeyThatIsNotALock(t *testing.T) {
	k := key(t)
	rdb(t).HSet(context.Background(), k, "a", "b")
	code, _, stderr := run(t, "status", k)
	if code != exitRedis || !strings.Contains(stderr, "not a lock") || strings.Contains(stderr, "script") {
		t.Fatalf("status of a hash: exit %d, %q", code, stderr)
	}
}

func TestTheSameServerTwiceIsAUsageErrorWithoutThePassword(t *testing.T) {
	code, _, stderr := run(t, "lock", "--redis", "redis://:s3cr3tPW@127.0.0.1:6379/1", "--redis", "redis://127.0.0.1:6379/2", "--key", "k")
	if code != exitUsage || !strings.Contains(stderr, "same server") || strings.Contains(stderr, "s3cr3tPW") {
		t.Errorf("exit %d, %q; want a usage error naming the same server, without the password", code, stderr)
	}
}

// redlockNodes starts n redis-servers and returns them with the --redis
// flags that name them all.
func redlockNodes(t *testing.T, n int) (nodes []*redistest.Server, flags []string) {
	t.Helper()
	for range n {
		s := redistest.Start(t)
		nodes = append(nodes, s)
		flags = append(flags, "--redis", "redis://"+s.Addr())
	}
	return nodes, flags
}

// Masking leaves a URL without a password as it is, IPv6 hosts and an '@'
// in the query included, and masks only the password of one that has it.
func TestMaskingLeavesTheRestOfAURLAlone(t *testing.T) {
	for u, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                    "redis://127.0.0.1:6379/0",
		"redis://[::1]/0":                             "redis://[::1]/0",
		"redis://[::1]:6380/2":                        "redis://[::1]:6380/2",
		"redis://127.0.0.1:6441/0?client_name=me@box": "redis://127.0.0.1:6441/0?client_name=me@box",
		"rediss://u:pw@cache.example:6380/1":          "rediss://u:xxxxx@cache.example:6380/1",
		"redis://:pw@127.0.0.1:6379/0":                "redis://:xxxxx@127.0.0.1:6379/0",
		"redis://:pw@127.0.0.1:6379/0#frag":           "redis://:xxxxx@127.0.0.1:6379/0#xxxxx",
		"redis://:p@ss:w/rd@127.0.0.1:30785":          "redis://xxxxx@127.0.0.1:30785",
		"redis://u:pw@h:6379/0?client_name=me#f":      "redis://u:xxxxx@h:6379/0?client_name=me#xxxxx",
		"redis://u:pw@h:6379/0?password=x&db=1#f":     "redis://xxxxx@h:6379/0?password=xxxxx&db=1#xxxxx", // does not parse
		"redis://127.0.0.1:6379 ":                     "redis://127.0.0.1:6379 ",
	} {
		if got := masked(u); got != want {
			t.Errorf("masked(%q) = %q, want %q", u, got, want)
		}
	}
}

// dlock --version and dlock version say the module's version and the Go
// version it was built with.
func TestVersionSaysTheModuleAndGoVersions(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, stderr := run(t, args...)
		if code != 0 || !strings.HasPrefix(out, "dlock ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("dlock %s: exit %d, %q %q; want the version and %s", args[0], code, out, stderr, runtime.Version())
		}
	}
}

// Every flag's help names what a duration flag takes, and gives its
// default once.
func TestHelpNamesDurationsAndGivesEachDefaultOnce(t *testing.T) {
	untyped := regexp.MustCompile(`(?m)^\s+--[a-z-]+ value\b`)
	for _, c := range commands {
		_, out, _ := run(t, c.name, "--help")
		if m := untyped.FindAllString(out, -1); len(m) > 0 {
			t.Errorf("dlock %s --help shows flags without a type: %q", c.name, m)
		}
		for _, para := range strings.Split(out, "\n  --") {
			if n := strings.Count(para, "(default"); n > 1 {
				t.Errorf("dlock %s --help gives a default %d times: --%s", c.name, n, para)
			}
		}
	}
	for _, name := range []string{"run", "lock", "elect"} {
		if _, out, _ := run(t, name, "--help"); !strings.Contains(out, "--ttl duration") || !strings.Contains(out, "--wait duration") {
			t.Errorf("dlock %s --help does not say --ttl and --wait take a duration:\n%s", name, out)
		}
	}
}

// Every exit code the command uses is documented, the same, in the
// top-level help and in the command reference (docs/command.md).
func TestEveryExitCodeIsDocumented(t *testing.T) {
	codes := exitCodes(t)
	_, help, _ := run(t, "help")
	readme, err := os.ReadFile("../../docs/command.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(readme), "| exit code | meaning |")
	table, _, _ = strings.Cut(table, "\n\n")
	_, helpCodes, _ := strings.Cut(help, "Exit codes:")
	for name, code := range codes {
		n := strconv.Itoa(code)
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(helpCodes) {
			t.Errorf("dlock help does not document exit %s (%s):\n%s", n, name, helpCodes)
		}
		if !regexp.MustCompile(`(?m)^\| [^|]*\b` + n + `\b[^|]*\|`).MatchString(table) {
			t.Errorf("the table of docs/command.md does not document exit %s (%s)", n, name)
		}
	}
}

// exitCodes returns the exit* constants of the command's sources, and
// fails the test for a literal exit code returned anywhere else.
func exitCodes(t *testing.T) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	literal := regexp.MustCompile(`return\s+(1[0-9][0-9]|[2-9][0-9])\b`)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if m := literal.FindAllString(string(src), -1); len(m) > 0 {
			t.Errorf("%s returns literal exit codes %q: name them with the exit constants", name, m)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "exit") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.INT {
					codes[id.Name], _ = strconv.Atoi(lit.Value)
				}
			}
			return true
		})
	}
	if len(codes) < 8 {
		t.Fatalf("found only the exit codes %v", codes)
	}
	return codes
}

// An election that does not elect within --wait says that it has a
// leader, and who, not that a lock is held by someone else.
func TestElectNotElectedInTimeNamesTheLeader(t *testing.T) {
	k := key(t)
	c := dlock.New(rdb(t))
	defer c.Close()
	ctx := context.Background()
	l, err := c.Election(k).Campaign(ctx, "leader-host:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	code, _, stderr := run(t, "elect", "--key", k, "--wait", "500ms", "--", "true")
	if code != exitConflict || !strings.Contains(stderr, `has a leader: "leader-host:8080"`) || strings.Contains(stderr, "held by someone else") {
		t.Fatalf("elect --wait 500ms: exit %d, %q; want %d and the leader named", code, stderr, exitConflict)
	}
}

// The demo fits 80 columns, or the terminal's width when $COLUMNS gives
// it.
func TestDemoFitsEightyColumnsOrTheTerminal(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	for _, width := range []int{80, 64} {
		cmd := exec.Command(bin, "demo", "--spawn=false")
		cmd.Env = append(os.Environ(), "DLOCK_REDIS=", "COLUMNS=")
		if width != 80 {
			cmd.Env = append(cmd.Env, "COLUMNS="+strconv.Itoa(width))
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("dlock demo: %v\n%s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if n := len([]rune(line)); n > width {
				t.Errorf("COLUMNS=%d: a demo line is %d columns wide: %q", width, n, line)
			}
		}
	}
}

// elect --wait 0 is one try, as for run: elected at once when nobody
// leads, not elected (75, the leader named) at once when someone does.
func TestElectWithWaitZeroTriesOnce(t *testing.T) {
	k := key(t)
	if code, out, stderr := run(t, "elect", "--key", k, "--wait", "0", "--", "echo", "led"); code != exitOK || !strings.Contains(out, "led") {
		t.Fatalf("elect --wait 0 with nobody leading: exit %d, %q %q; want 0 and the command run", code, out, stderr)
	}
	c := dlock.New(rdb(t))
	defer c.Close()
	ctx := context.Background()
	l, err := c.Election(k).Campaign(ctx, "leader-host:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	code, out, stderr := run(t, "elect", "--key", k, "--wait", "0", "--", "echo", "led")
	if code != exitConflict || strings.Contains(out, "led") || !strings.Contains(stderr, `has a leader: "leader-host:8080"`) {
		t.Fatalf("elect --wait 0 with a leader: exit %d, %q %q; want %d and the leader named", code, out, stderr, exitConflict)
	}
}

// A mistyped flag is a usage error that says so in dlock's words, with
// the nearest flag; help writes every flag with two dashes, as the docs do.
func TestAMistypedFlagIsNamedWithTheNearestOne(t *testing.T) {
	code, _, stderr := run(t, "run", "--kye", "x", "--", "true")
	if code != exitUsage || !strings.HasPrefix(stderr, "dlock: run: unknown flag --kye (did you mean --key?)") {
		t.Errorf("run --kye: exit %d, %q; want %d and the nearest flag", code, stderr, exitUsage)
	}
	if code, _, stderr := run(t, "status", "--jsno", "k"); code != exitUsage || !strings.Contains(stderr, "did you mean --json?") {
		t.Errorf("status --jsno: exit %d, %q", code, stderr)
	}
	for _, c := range commands {
		_, help, _ := run(t, c.name, "--help")
		if m := regexp.MustCompile(`(?m)^  -[a-z]`).FindAllString(help, -1); len(m) > 0 {
			t.Errorf("dlock %s --help lists flags with one dash: %q", c.name, m)
		}
	}
	if _, help, _ := run(t, "run", "--help"); !strings.Contains(help, "\n  --key NAME\n") {
		t.Errorf("dlock run --help does not list --key NAME:\n%s", help)
	}
}

// Flags written with one dash, as Go's flag package took them, still work
// (scripts written for earlier dlocks): dlock has no one-letter flags.
func TestOneDashFlagsStillWork(t *testing.T) {
	k := key(t)
	if code, out, stderr := run(t, "run", "-key", k, "-wait=0", "--", "echo", "ran"); code != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("run -key K -wait=0: exit %d, %q %q", code, out, stderr)
	}
	if code, out, stderr := run(t, "status", k, "-json"); code != exitFree || !strings.Contains(out, `"held":false`) {
		t.Fatalf("status K -json: exit %d, %q %q", code, out, stderr)
	}
	// run's command line is CMD's from its first word: its flags stay its own.
	if code, out, stderr := run(t, "run", "--key", k, "echo", "-json", "--wait"); code != 0 || !strings.Contains(out, "-json --wait") {
		t.Fatalf("run --key K echo -json --wait: exit %d, %q %q", code, out, stderr)
	}
}

// run's command line is CMD's from its first word: a -h or --help there
// is CMD's to answer, not dlock's.
func TestRunLeavesItsCommandsHelpToTheCommand(t *testing.T) {
	k := key(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--key", k, "--wait", "0", "echo", "-h", "/tmp"}, "-h /tmp\n"},
		{[]string{"run", "--key", k, "echo", "x", "--help"}, "x --help\n"},
		{[]string{"run", "--key", k, "sh", "-c", "echo $0", "--help"}, "--help\n"},
		{[]string{"run", "--key", k, "--", "echo", "-h"}, "-h\n"},
	} {
		code, out, stderr := run(t, c.args...)
		if code != exitOK || out != c.want {
			t.Errorf("dlock %q: exit %d, %.80q %q; want 0 and the command's %q", c.args, code, out, stderr, c.want)
		}
	}
	if code, out, _ := run(t, "run", "--key", k, "--help", "echo", "x"); code != exitOK || !strings.HasPrefix(out, "Usage: dlock run") {
		t.Errorf("dlock run --key K --help echo x: exit %d, %q; want run's help", code, out)
	}
}

// elect wants its command after "--": a command's flag before it is an
// unknown flag of elect's, named as written, with a hint to "--"; a --help
// there is the command's, so it is no request for elect's help.
func TestElectWantsItsCommandAfterTheDoubleDash(t *testing.T) {
	k := key(t)
	code, out, stderr := run(t, "elect", "--key", k, "--wait", "0", "ls", "-d", "/tmp")
	if code != exitUsage || !strings.HasPrefix(stderr, "dlock: elect: unknown flag -d:") || !strings.Contains(stderr, "after --") {
		t.Errorf("elect ... ls -d /tmp: exit %d, %q %q; want %d, -d named as written and a hint to --", code, out, stderr, exitUsage)
	}
	code, out, stderr = run(t, "elect", "--key", k, "--wait", "0", "grep", "--help")
	if code != exitUsage || strings.Contains(out, "Usage: dlock elect") || !strings.Contains(stderr, "after --") {
		t.Errorf("elect ... grep --help: exit %d, %.80q %q; want %d and a hint to --", code, out, stderr, exitUsage)
	}
	if code, out, stderr := run(t, "elect", "--key", k, "--wait", "0", "--", "echo", "-d", "--help"); code != exitOK || out != "-d --help\n" {
		t.Errorf("elect ... -- echo -d --help: exit %d, %q %q; want 0 and the command run", code, out, stderr)
	}
}

// A mistyped flag written with one dash is named as it was written.
func TestAMistypedOneDashFlagIsNamedAsWritten(t *testing.T) {
	code, _, stderr := run(t, "run", "-kye", "x", "--", "true")
	if code != exitUsage || !strings.HasPrefix(stderr, "dlock: run: unknown flag -kye (did you mean --key?)") {
		t.Errorf("run -kye: exit %d, %q; want %d and the nearest flag", code, stderr, exitUsage)
	}
	if code, _, stderr := run(t, "status", "-hello", "k"); code != exitUsage || !strings.HasPrefix(stderr, "dlock: status: unknown flag -hello") {
		t.Errorf("status -hello: exit %d, %q; want %d, not help", code, stderr, exitUsage)
	}
}

// Help asked for twice is the general usage, as help alone is (found by
// review: `dlock help help` recursed until the stack overflowed).
func TestHelpOfHelpIsTheUsage(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"--help", "--help"}, {"-h", "-h"}, {"help", "--help"}} {
		var out, errs strings.Builder
		if code := dispatch(args, &out, &errs); code != exitOK || !strings.Contains(out.String(), "Usage") {
			t.Errorf("dlock %s: exit %d, %q %q; want the usage, exit 0", strings.Join(args, " "), code, out.String(), errs.String())
		}
	}
}
