// Package owner is the format of an owner record (dlock.WithOwner) on
// Redis: "<until_ms> <JSON>" in the hash dlock:owner:{key}, one field per
// hold, named by a digest of its token (scripts/owner.lua writes it).
package owner

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxRecord is the most bytes a record may take.
const MaxRecord = 1024

// Record says who holds a lock: dlock.Owner's fields.
type Record struct {
	Host    string `json:"h,omitempty"`
	PID     int    `json:"p,omitempty"`
	Program string `json:"g,omitempty"`
	Label   string `json:"l,omitempty"`
	Since   int64  `json:"s"` // when the hold began, unix ms
	Holder  string `json:"t"` // the start of the token, redacted
}

// this is the process's own Host, PID and Program, read once.
var this = sync.OnceValue(func() Record {
	host, _ := os.Hostname()
	return Record{Host: host, PID: os.Getpid(), Program: filepath.Base(os.Args[0])}
})

// Encode returns r as stored, its empty Host, PID and Program this
// process's, and the secrets in its Label and Program masked (Redact): a
// record is read by anyone who may read the lock (status, the console, a
// revocation's audit entry); a record above MaxRecord bytes is an error.
func Encode(r Record) (string, error) {
	r.Label, r.Program = Redact(r.Label), Redact(r.Program)
	p := this()
	if r.Host == "" {
		r.Host = p.Host
	}
	if r.PID == 0 {
		r.PID = p.PID
	}
	if r.Program == "" {
		r.Program = p.Program
	}
	b, err := json.Marshal(r)
	if err != nil || len(b) > MaxRecord {
		return "", fmt.Errorf("owner record of %d bytes: at most %d", len(b), MaxRecord)
	}
	return string(b), nil
}

// ID names a hold in its key's records: a digest of the token, from which
// the token cannot be had.
func ID(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// Live reads the stored values ("until_ms JSON" each) that are still live
// at nowMS, oldest hold first; values it cannot read are skipped.
func Live(values []any, nowMS int64) []Record {
	var out []Record
	for _, v := range values {
		s, _ := v.(string)
		until, js, ok := strings.Cut(s, " ")
		if u, err := strconv.ParseInt(until, 10, 64); !ok || err != nil || u <= nowMS {
			continue
		}
		var r Record
		if json.Unmarshal([]byte(js), &r) == nil {
			out = append(out, r)
		}
	}
	Sort(out)
	return out
}

// Sort orders records by when their holds began, oldest first.
func Sort(rs []Record) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Since < rs[j].Since })
}

// Time returns a record's Since as a time.
func (r Record) Time() time.Time { return time.UnixMilli(r.Since) }

// Masked is what Redact puts in place of a secret.
const Masked = "xxxxx"

var (
	// credentials is the password of user:password@host, a URL's
	// (scheme://user:password@) or a bare word's (mongo --host
	// u:password@db). It runs to the word's last '@', so a password with
	// an unencoded '@' or '/' is masked whole; it cannot begin with '/'
	// (a bare "scheme:" is followed by the URL's "//"), nor hold a blank.
	credentials = regexp.MustCompile(`((?:^|://|[\s'"=;(&|,])[^\s:/@'"=;(&|,]*):[^\s/]\S*@`)
	// secretValue is the value given to a name that says it holds a
	// secret: one that holds pass, pwd, secret, token, auth or credential,
	// or ends in key after more (API_KEY, STRIPE_KEY, apikey; not a bare
	// key, as --key=NAME is a lock's name). The name stands alone (after
	// the start or a character no name holds: a blank, ';', '(', a quote)
	// and takes its value as NAME=VALUE or --name=VALUE, a shell word of
	// quoted ('...', "...") and bare parts that ends at a blank or one of
	// ;&|(); or as JSON's "name": VALUE, a header's or YAML's name: VALUE
	// (with its scheme: Authorization: Bearer abc), a string or a word up to
	// ',' or '}'. Group 1 is what comes before the value, 2 and 3 the
	// separator.
	secretValue = regexp.MustCompile(`(?i)((?:^|[^\w.-])[\w.-]*(?:(?:pass|pwd|secret|token|auth|credential)[\w.-]*|[a-z0-9][_-]?key))` +
		`(?:(=)(?:'[^']*'|"(?:[^"\\]|\\.)*"|[^\s'";&|()])+` +
		`|(["']?\s*:\s*)(?:(?:bearer|basic|digest|token)\s+)?(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,}'"]+))`)
	// userFlag is the password of curl's -u/--user user:password.
	userFlag = regexp.MustCompile(`((?:^|\s)(?:-u|--user)(?:\s+|=)[^\s:]+):\S+`)
)

// Redact masks the secrets a command line or a label may carry, so that
// no owner record stores them: the password of user:password@host, in a
// URL or not (it becomes user:xxxxx@), and the value given to a name that
// says it is secret (secretValue's: PGPASSWORD=hunter2, --api-key='a b'
// and {"token":"t"} become PGPASSWORD=xxxxx, --api-key=xxxxx and
// {"token":xxxxx}; Authorization: Bearer abc becomes Authorization: xxxxx),
// and curl's -u user:password. It cannot know a secret given as an argument of its
// own (--password hunter2, -p hunter2), a URL's password that holds a
// blank, or a value under a name that does not say secret: `dlock run`
// labels a hold with the command's name only, unless asked for more.
func Redact(s string) string {
	s = credentials.ReplaceAllString(s, "${1}:"+Masked+"@")
	s = userFlag.ReplaceAllString(s, "${1}:"+Masked)
	return secretValue.ReplaceAllString(s, "${1}${2}${3}"+Masked)
}
