package doctor

import "testing"

// A key is a hand-written lock only when both its name and its value say
// so; a flag value (1, true) counts only under a name one of whose
// segments is a lock's.
func TestHandWrittenLocksAreJudgedByNameAndValue(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		lock       bool
	}{
		{"report_lock", "host-a:4242", true},
		{"jobLock", "0f8c2a3e-9b1d-4c57-8a6e-2b7f1c9d0e4a", true},
		{"lock:order:1", "0f8c2a3e-9b1d-4c57-8a6e-2b7f1c9d0e4a", true},
		{"lock:report", "1", true},
		{"lock:x", "1", true}, // the classic fixed-value lock
		{"jobs:lock", "true", true},
		{"lock.foo", "1796606937", true}, // SETNX with the expiry as value
		{"mutex:orders", "locked", true},
		{"lock:order:2", "1796608340.95", true}, // a fractional Unix time: Python's time.time()+t
		{"lock:order:3", "1796608340950", true}, // in milliseconds
		{"mylock:report", "host1:4242", true},   // a word that ends in lock
		{"mylock:report", "1", true},            // and a segment that does
		{"ORDERLOCK:7", "a1b2c3", true},         // upper case, one word
		{"spinlocks:db", "worker-3", true},      // plural
		{"jobs:nightly:lock", `{"owner":"host1:4242","until":1796608340}`, true},
		{"deploy_mutex", `{"holder": "ci-7"}`, true},
		{"lock:job", `{"expires_at": 1796608340950}`, true},
		{"lock:attempts", "42", false},      // a counter
		{"counter:nolock", "tok123", false}, // "nolock" is no lock
		{"blocklist:1", "abc123", false},
		{"adblock:rules", "abc123", false},
		{"clock:skew", "abc123", false},
		{"worldclock:tz", "abc123", false},
		{"door:unlock", "abc123", false},
		{"deadlock:report", "abc123", false},
		{"gridlock:city", "abc123", false},
		{"padlock:sku", "abc123", false},
		{"cache:lock:1", `{"name":"ann"}`, false}, // JSON, but no lock's field
		{"lock:note", "hello world", false},
		{"counter:42", "7", false},
		{"user:1:locked", "true", false},          // an account's flag: locked is no lock
		{"user:1:locked", "a1b2c3", false},        // whatever its value
		{"settings:1:screen_lock", "1", false},    // a setting: a flag under a segment that is not a lock's
		{"settings:1:screen_lock", "true", false}, // the same
		{"lock:order:4", "17966.5", false},        // a number, not a time
		// A review's: settings and words under lock-like names are no locks.
		{"flags:lock_screen", "false", false},
		{"settings:screen_lock", "off", false},
		{"user:1:caps_lock", "enabled", false},
		{"user:1:caps_lock", "never", false},
		{"product:sherlock", "v2", false},
		{"airlock:status", "open", false},
		{"config:lock", `{"lease_seconds":30}`, false},
		{"lock", `{"expiresIn":30}`, false},
		{"my-global-mutex", "dGhpcyBpcyByYW5kb20h", true}, // redsync's value: random base64
	} {
		if got := handWritten(tc.key, tc.value); got != tc.lock {
			t.Errorf("handWritten(%q, %q) = %v, want %v", tc.key, tc.value, got, tc.lock)
		}
	}
}
