package doctor

import "testing"

// A key is a hand-written lock only when both its name and its value say
// so.
func TestHandWrittenLocksAreJudgedByNameAndValue(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		lock       bool
	}{
		{"report_lock", "host-a:4242", true},
		{"jobLock", "0f8c2a3e-9b1d-4c57-8a6e-2b7f1c9d0e4a", true},
		{"lock:report", "1", true},
		{"lock.foo", "1796606937", true}, // SETNX with the expiry as value
		{"mutex:orders", "locked", true},
		{"lock:attempts", "42", false},      // a counter
		{"counter:nolock", "tok123", false}, // "nolock" is no word lock
		{"blocklist:1", "abc123", false},
		{"clock:skew", "abc123", false},
		{"cache:lock:1", `{"name":"ann"}`, false},
		{"lock:note", "hello world", false},
		{"counter:42", "7", false},
	} {
		if got := handWritten(tc.key, tc.value); got != tc.lock {
			t.Errorf("handWritten(%q, %q) = %v, want %v", tc.key, tc.value, got, tc.lock)
		}
	}
}
