package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// urlCommands are the subcommands that take --redis (or $DLOCK_REDIS),
// with arguments that make each talk to Redis at once.
var urlCommands = [][]string{
	{"status", "k"},
	{"ls", "*"},
	{"lock", "--key", "k"},
	{"lock", "--json", "--key", "k", "--wait", "1s"},
	{"unlock", "--key", "k", "--token", "t"},
	{"extend", "--key", "k", "--token", "t", "--ttl", "1s"},
	{"run", "--key", "k", "--", "true"},
	{"elect", "--key", "k", "--", "true"},
	{"leader", "k"},
	{"doctor"},
}

// leaks returns the pieces of secret, of three characters or more, that
// text shows. "://" is left out: every URL has it.
func leaks(text, secret string) []string {
	var found []string
	for i := 0; i < len(secret); i++ {
		for j := i + 3; j <= len(secret); j++ {
			if s := secret[i:j]; s != "://" && strings.Contains(text, s) {
				found = append(found, s)
			}
		}
	}
	return found
}

// A password with characters a URL cannot hold unencoded makes the URL
// unparsable; no part of it is shown, the parser's message (which quotes
// it) is not echoed, and the error says to percent-encode it: on every
// subcommand, through --redis, $DLOCK_REDIS and a Redlock node list.
func TestAPasswordThatBreaksTheURLIsNotShownInPart(t *testing.T) {
	const pw = "p@ss:w/rd"
	bad := "redis://:" + pw + "@127.0.0.1:30785"
	for _, args := range append(urlCommands, []string{"demo", "--spawn=false"}) {
		for _, via := range []string{"--redis", "$DLOCK_REDIS", "a Redlock list"} {
			if args[0] == "demo" && via != "--redis" {
				continue // demo takes --redis only
			}
			cmd := dlockCmd(args...)
			switch via {
			case "--redis":
				cmd.Args = append(cmd.Args[:2], append([]string{"--redis", bad}, cmd.Args[2:]...)...)
			case "$DLOCK_REDIS":
				cmd.Env = append(cmd.Env, "DLOCK_REDIS="+bad)
			default:
				cmd.Args = append(cmd.Args[:2], append([]string{"--redis", serverURL(), "--redis", bad}, cmd.Args[2:]...)...)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != exitUsage {
				t.Errorf("%q via %s: exit %d, want %d: %s", args, via, code, exitUsage, out.String())
			}
			if l := leaks(out.String(), pw); len(l) > 0 {
				t.Errorf("%q via %s shows %q of the password: %s", args, via, l, out.String())
			}
			if !strings.Contains(out.String(), "percent-encode") {
				t.Errorf("%q via %s does not suggest percent-encoding the password: %s", args, via, out.String())
			}
		}
	}
}

// For many generated passwords, with the characters that break URLs, no
// output of any subcommand shows three characters of the password in a
// row, whether the URL parses or not, through --redis or $DLOCK_REDIS.
func TestNoPartOfAGeneratedPasswordIsEverShown(t *testing.T) {
	var logged bytes.Buffer
	redis.SetLogger(bufferLogger{&logged})
	defer redis.SetLogger(quiet{})
	r := rand.New(rand.NewPCG(1, 2))
	port := unusedPort(t)
	for i := range 120 {
		pw := passwordOf(r)
		u := []string{
			"redis://:" + pw + "@127.0.0.1:" + port + "/0",
			"redis://user:" + pw + "@127.0.0.1:" + port,
			"rediss://:" + pw + "@127.0.0.1:" + port + "?dial_timeout=1s",
		}[i%3]
		args := append([]string(nil), urlCommands[i%len(urlCommands)]...)
		viaEnv := i%2 == 1
		if viaEnv {
			t.Setenv("DLOCK_REDIS", u)
		} else {
			t.Setenv("DLOCK_REDIS", "")
			args = append(args[:1:1], append([]string{"--redis", u}, args[1:]...)...)
		}
		logged.Reset()
		var out bytes.Buffer
		dispatch(args, &out, &out)
		if l := leaks(out.String()+logged.String(), pw); len(l) > 0 {
			t.Errorf("dlock %q (DLOCK_REDIS: %v) with password %q shows %q of it:\n%s%s", args, viaEnv, pw, l, out.String(), logged.String())
		}
	}
}

// passwordAlphabet holds the characters that break a URL, a "p" (which a
// substring-replacing mask once replaced everywhere), and capitals that
// no message of dlock's uses three of in a row; no digits, no "x" (the
// mask), so that any three characters of a password found in the output
// come from the password.
const passwordAlphabet = "@:/#%?,pQZJKWV"

func passwordOf(r *rand.Rand) string {
	b := make([]byte, 3+r.IntN(14))
	for i := range b {
		b[i] = passwordAlphabet[r.IntN(len(passwordAlphabet))]
	}
	return string(b)
}

// bufferLogger collects what go-redis logs.
type bufferLogger struct{ b *bytes.Buffer }

func (l bufferLogger) Printf(_ context.Context, format string, args ...any) {
	fmt.Fprintf(l.b, format+"\n", args...)
}

// unusedPort returns a loopback port where nothing listens (just closed).
func unusedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

// A refused connection says where its address came from: --redis,
// $DLOCK_REDIS, or the default, which it names with the way to change it.
func TestARefusedConnectionNamesWhereTheAddressCameFrom(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	addr := "127.0.0.1:" + unusedPort(t)
	cases := []struct {
		name, env, flag, want string
	}{
		{"flag", "", "redis://" + addr, "(from --redis)"},
		{"env", "redis://" + addr, "", "(from $DLOCK_REDIS)"},
	}
	if cn, err := net.Dial("tcp", "127.0.0.1:6379"); err == nil {
		cn.Close()
		t.Log("something listens on 127.0.0.1:6379: the default's case is skipped")
	} else {
		cases = append(cases, struct{ name, env, flag, want string }{"default", "", "", "(the default; set --redis or $DLOCK_REDIS)"})
	}
	for _, tc := range cases {
		for _, args := range [][]string{{"status", "k"}, {"lock", "--key", "k"}, {"run", "--key", "k", "--", "true"}, {"ls", "*"}, {"doctor"}, {"leader", "k"}} {
			t.Run(tc.name+" "+args[0], func(t *testing.T) {
				t.Parallel() // each run rides out the refusal a while
				refusedConnection(t, tc.env, tc.flag, tc.want, addr, args)
			})
		}
	}
}

// refusedConnection runs dlock args, with --redis flag or $DLOCK_REDIS env
// (or neither: the default), against nothing listening at addr, and checks
// that it says where the address came from (want).
func refusedConnection(t *testing.T, env, flag, want, addr string, args []string) {
	cmd := dlockCmd(args...)
	cmd.Env = append(cmd.Env, "DLOCK_REDIS="+env)
	where := addr
	if flag != "" {
		cmd.Args = append(cmd.Args[:2], append([]string{"--redis", flag}, cmd.Args[2:]...)...)
	} else if env == "" {
		where = "127.0.0.1:6379"
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitRedis {
		t.Errorf("%q: exit %d, want %d: %s", args, code, exitRedis, out.String())
	}
	if want := "cannot reach Redis at " + where + " " + want; !strings.Contains(out.String(), want) {
		t.Errorf("%q printed %q, want it to say %q", args, out.String(), want)
	}
}

// Each Redlock node is reached with its own URL's credentials, and a node
// that needs a password its URL does not give is said to need one: not a
// protocol error, and no warning about a grant to give back.
func TestRedlockNodesUseTheirOwnCredentials(t *testing.T) {
	plain := redistest.Start(t)
	two := redistest.Start(t, "--requirepass", "second-pw")
	three := redistest.Start(t, "--requirepass", "third-pw")
	k := key(t)
	urls := []string{"redis://" + plain.Addr(), "redis://:second-pw@" + two.Addr(), "redis://:third-pw@" + three.Addr()}
	flags := []string{"--redis", urls[0], "--redis", urls[1], "--redis", urls[2]}
	code, out, stderr := run(t, append([]string{"lock", "--key", k, "--wait", "5s", "--json"}, flags...)...)
	if code != 0 || !strings.Contains(out, `"obtained"`) || stderr != "" {
		t.Fatalf("lock over three nodes with their passwords: exit %d, %q %q", code, out, stderr)
	}
	cmd := dlockCmd("status", k)
	cmd.Env = append(cmd.Env, "DLOCK_REDIS="+strings.Join(urls, ","))
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "held") {
		t.Fatalf("status through $DLOCK_REDIS's list: %v, %s", err, b)
	}
	noPasswords := []string{"--redis", urls[0], "--redis", "redis://" + two.Addr(), "--redis", "redis://" + three.Addr()}
	for _, args := range [][]string{{"lock", "--key", key(t)}, {"lock", "--key", key(t), "--wait", "1s"}} {
		code, _, stderr := run(t, append(args, noPasswords...)...)
		if code != exitRedis || strings.Contains(stderr, "Protocol error") || strings.Contains(stderr, "give back") || !strings.Contains(stderr, "needs a password") {
			t.Errorf("%q without the passwords: exit %d, %q; want %d and word that the nodes need a password", args, code, stderr, exitRedis)
		}
	}
}

// FuzzPasswordsAreNeverShown builds Redis URLs around fuzzed passwords
// (each byte picks a character of passwordAlphabet) and checks what dlock
// may print of such a URL: the masked URL, a parse error, the address it
// would dial (errors name it), through --redis and $DLOCK_REDIS's list.
func FuzzPasswordsAreNeverShown(f *testing.F) {
	f.Add([]byte("p@ss:w/rd"), uint8(0))
	f.Add([]byte("J,@WZZQK:##:WQKp"), uint8(1))
	f.Add([]byte("/p%W,WZ@,?"), uint8(2))
	f.Add([]byte("QJK#@,,:/Z,V:"), uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, shape uint8) {
		if len(raw) < 3 {
			return
		}
		b := make([]byte, len(raw))
		for i, c := range raw {
			b[i] = passwordAlphabet[int(c)%len(passwordAlphabet)]
		}
		pw := string(b)
		u := []string{
			"redis://:" + pw + "@127.0.0.1:6379/0",
			"redis://user:" + pw + "@127.0.0.1:6379",
			"rediss://:" + pw + "@127.0.0.1:6379?dial_timeout=1s",
			"redis://:" + pw + "@127.0.0.1",
		}[int(shape)%4]
		var shown []string
		for _, source := range []string{fromFlag, fromEnv} {
			urls := []string{u}
			if source == fromEnv {
				urls = splitURLs(u)
			}
			for _, one := range urls {
				shown = append(shown, masked(one))
				if o, err := parseRedisURL(one, source); err != nil {
					shown = append(shown, err.Error())
				} else {
					shown = append(shown, o.Addr, o.Username)
				}
			}
		}
		if l := leaks(strings.Join(shown, "\n"), pw); len(l) > 0 {
			t.Errorf("URL %q, password %q: dlock would show %q of it:\n%s", u, pw, l, strings.Join(shown, "\n"))
		}
	})
}

// A --redis URL given before the command is an unknown command, and the
// message that says so masks its password (found by review: it echoed
// the URL whole).
func TestAMisplacedURLIsNotEchoedWhole(t *testing.T) {
	for _, first := range []string{"--redis=redis://u:Zq9SECRETpw@127.0.0.1:1", "-redis=redis://:Zq9SECRETpw@127.0.0.1:1/0"} {
		var out bytes.Buffer
		if code := dispatch([]string{first, "status", "k"}, &out, &out); code != exitUsage {
			t.Errorf("%s: exit %d, want %d", first, code, exitUsage)
		}
		if strings.Contains(out.String(), "SECRET") || !strings.Contains(out.String(), "unknown command") {
			t.Errorf("%s: %s", first, out.String())
		}
	}
}
